package main

import (
	"fmt"
	"go/types"
	"slices"
	"strings"
)

// apiLines returns the exported surface of p, one declaration a line,
// sorted, in the form of Go's api/ files: a const's type and value, a
// var's type, a func's signature (types only), a type's kind, every
// exported field of a struct (an embedded one as "embedded T"), every
// method of an interface, and every exported method in a type's method
// sets, promoted ones included.
func apiLines(p *types.Package) []string {
	w := &writer{pkg: p}
	scope := p.Scope()
	for _, name := range scope.Names() {
		switch obj := scope.Lookup(name).(type) {
		case *types.Const:
			if obj.Exported() {
				w.constant(obj)
			}
		case *types.Var:
			if obj.Exported() {
				w.emit("var %s %s", name, w.typ(obj.Type()))
			}
		case *types.Func:
			if obj.Exported() {
				sig := obj.Type().(*types.Signature)
				w.emit("func %s%s%s", name, w.typeParams(sig.TypeParams()), w.signature(sig))
			}
		case *types.TypeName:
			if obj.Exported() {
				w.typeName(obj)
			}
		}
	}
	slices.Sort(w.lines)
	return slices.Compact(w.lines)
}

// A writer writes one package's lines.
type writer struct {
	pkg   *types.Package
	lines []string
}

func (w *writer) emit(format string, args ...any) {
	w.lines = append(w.lines, "pkg "+w.pkg.Path()+", "+fmt.Sprintf(format, args...))
}

func (w *writer) constant(c *types.Const) {
	w.emit("const %s %s", c.Name(), w.typ(c.Type()))
	short, exact := c.Val().String(), c.Val().ExactString()
	if short == exact {
		w.emit("const %s = %s", c.Name(), short)
	} else {
		w.emit("const %s = %s  // %s", c.Name(), short, exact)
	}
}

func (w *writer) typeName(obj *types.TypeName) {
	name := obj.Name()
	if a, ok := obj.Type().(*types.Alias); ok {
		w.emit("type %s%s = %s", name, w.typeParams(a.TypeParams()), w.typ(a.Rhs()))
		// An alias of an unexported type or of an internal package's is
		// the only name users have for it: its fields and methods are
		// written under the alias, as no other line has them.
		if n, ok := types.Unalias(a).(*types.Named); ok && a.TypeParams().Len() == 0 && n.TypeArgs().Len() == 0 &&
			n.Obj().Pkg() != nil && (!n.Obj().Exported() || internal(n.Obj().Pkg().Path())) {
			w.emit("%s", w.named("type "+name, name, n))
		}
		return
	}
	n, ok := obj.Type().(*types.Named)
	if !ok { // an alias, when go/types does not make them types.Alias
		w.emit("type %s = %s", name, w.typ(obj.Type()))
		return
	}
	recv := name
	if tps := n.TypeParams(); tps.Len() > 0 {
		names := make([]string, tps.Len())
		for i := range names {
			names[i] = tps.At(i).Obj().Name()
		}
		recv += "[" + strings.Join(names, ", ") + "]"
	}
	w.emit("%s", w.named("type "+name+w.typeParams(n.TypeParams()), recv, n))
}

// named writes the lines of the named type n below its first one, which
// it returns: head and its kind. Its methods' receiver is written recv.
func (w *writer) named(head, recv string, n *types.Named) string {
	switch u := n.Underlying().(type) {
	case *types.Struct:
		for i := range u.NumFields() {
			f := u.Field(i)
			switch {
			case !f.Exported():
			case f.Embedded():
				w.emit("%s struct, embedded %s", head, w.typ(f.Type()))
			default:
				w.emit("%s struct, %s %s", head, f.Name(), w.typ(f.Type()))
			}
		}
		for _, f := range w.promoted(n, u, map[*types.Struct]bool{}) {
			w.emit("%s struct, %s %s", head, f.Name(), w.typ(f.Type()))
		}
		head += " struct"
	case *types.Interface:
		return w.iface(head, u) // its methods are the interface's
	default:
		head += " " + w.typ(u)
	}
	seen := map[string]bool{}
	for _, t := range []types.Type{n, types.NewPointer(n)} {
		ms := types.NewMethodSet(t)
		for i := range ms.Len() {
			sel := ms.At(i)
			m := sel.Obj()
			if !m.Exported() || seen[m.Name()] {
				continue
			}
			seen[m.Name()] = true
			star := ""
			if _, ok := t.(*types.Pointer); ok {
				star = "*"
			}
			w.emit("method (%s%s) %s%s", star, recv, m.Name(), w.signature(sel.Type().(*types.Signature)))
		}
	}
	return head
}

// promoted returns the exported fields that s, n's struct, promotes from
// the unexported structs it embeds, at any depth: users read and write
// them as n's own, though no "embedded" line names where they come from.
// A field that a shallower one hides, or another at its depth makes
// ambiguous, is not n's.
func (w *writer) promoted(n *types.Named, s *types.Struct, seen map[*types.Struct]bool) []*types.Var {
	seen[s] = true
	var fields []*types.Var
	for i := range s.NumFields() {
		f := s.Field(i)
		if !f.Embedded() || f.Exported() {
			continue
		}
		t := f.Type()
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		inner, ok := t.Underlying().(*types.Struct)
		if !ok || seen[inner] {
			continue
		}
		for j := range inner.NumFields() {
			g := inner.Field(j)
			if !g.Exported() {
				continue
			}
			if obj, _, _ := types.LookupFieldOrMethod(n, true, w.pkg, g.Name()); obj == g {
				fields = append(fields, g)
			}
		}
		fields = append(fields, w.promoted(n, inner, seen)...)
	}
	return fields
}

// iface writes an interface type's lines below its first one, which it
// returns, naming its exported methods (and saying if it has unexported
// ones): a line a method, and one for each type set it embeds, as a
// constraint does.
func (w *writer) iface(head string, t *types.Interface) string {
	var names []string
	unexported := false
	for i := range t.NumMethods() {
		if m := t.Method(i); m.Exported() {
			names = append(names, m.Name())
		} else {
			unexported = true
		}
	}
	slices.Sort(names)
	if unexported {
		names = append(names, "unexported methods")
	}
	for i := range t.NumMethods() {
		if m := t.Method(i); m.Exported() {
			w.emit("%s interface, %s%s", head, m.Name(), w.signature(m.Type().(*types.Signature)))
		}
	}
	for i := range t.NumEmbeddeds() {
		if e := t.EmbeddedType(i); !types.IsInterface(e) {
			w.emit("%s interface, %s", head, w.typ(e))
		}
	}
	if len(names) == 0 {
		return head + " interface {}"
	}
	return head + " interface { " + strings.Join(names, ", ") + " }"
}

// typ is t as Go writes it, with a package other than w's named by its
// name and no parameter's name.
func (w *writer) typ(t types.Type) string {
	var b strings.Builder
	w.writeType(&b, t)
	return b.String()
}

func (w *writer) writeType(b *strings.Builder, t types.Type) {
	switch t := t.(type) {
	case *types.Basic:
		if t.Kind() == types.UnsafePointer {
			b.WriteString("unsafe.")
		}
		b.WriteString(t.Name())
	case *types.Pointer:
		b.WriteByte('*')
		w.writeType(b, t.Elem())
	case *types.Slice:
		b.WriteString("[]")
		w.writeType(b, t.Elem())
	case *types.Array:
		fmt.Fprintf(b, "[%d]", t.Len())
		w.writeType(b, t.Elem())
	case *types.Map:
		b.WriteString("map[")
		w.writeType(b, t.Key())
		b.WriteByte(']')
		w.writeType(b, t.Elem())
	case *types.Chan:
		w.writeChan(b, t)
	case *types.Signature:
		b.WriteString("func")
		w.writeSignature(b, t)
	case *types.Struct:
		b.WriteString("struct{")
		for i := range t.NumFields() {
			if i > 0 {
				b.WriteString("; ")
			}
			if f := t.Field(i); !f.Embedded() {
				b.WriteString(f.Name() + " ")
			}
			w.writeType(b, t.Field(i).Type())
		}
		b.WriteByte('}')
	case *types.Interface:
		w.writeInterface(b, t)
	case *types.Union:
		for i := range t.Len() {
			if i > 0 {
				b.WriteString(" | ")
			}
			if t.Term(i).Tilde() {
				b.WriteByte('~')
			}
			w.writeType(b, t.Term(i).Type())
		}
	case *types.Named:
		w.writeName(b, t.Obj(), t.TypeArgs())
	case *types.Alias:
		w.writeName(b, t.Obj(), t.TypeArgs())
	case *types.TypeParam:
		b.WriteString(t.Obj().Name())
	case *types.Tuple:
		w.writeTuple(b, t, false)
	default:
		b.WriteString(types.TypeString(t, w.qualifier))
	}
}

func (w *writer) writeChan(b *strings.Builder, t *types.Chan) {
	switch t.Dir() {
	case types.SendOnly:
		b.WriteString("chan<- ")
	case types.RecvOnly:
		b.WriteString("<-chan ")
	default:
		b.WriteString("chan ")
		if e, ok := t.Elem().(*types.Chan); ok && e.Dir() == types.RecvOnly {
			b.WriteByte('(')
			w.writeType(b, e)
			b.WriteByte(')')
			return
		}
	}
	w.writeType(b, t.Elem())
}

func (w *writer) writeInterface(b *strings.Builder, t *types.Interface) {
	if t.IsImplicit() && t.NumEmbeddeds() == 1 && t.NumExplicitMethods() == 0 {
		w.writeType(b, t.EmbeddedType(0)) // [T ~int | ~int64]
		return
	}
	if t.NumEmbeddeds() == 0 && t.NumExplicitMethods() == 0 {
		b.WriteString("interface{}")
		return
	}
	b.WriteString("interface{ ")
	for i := range t.NumEmbeddeds() {
		if i > 0 {
			b.WriteString("; ")
		}
		w.writeType(b, t.EmbeddedType(i))
	}
	for i := range t.NumExplicitMethods() {
		if i > 0 || t.NumEmbeddeds() > 0 {
			b.WriteString("; ")
		}
		m := t.ExplicitMethod(i)
		b.WriteString(m.Name())
		w.writeSignature(b, m.Type().(*types.Signature))
	}
	b.WriteString(" }")
}

func (w *writer) writeName(b *strings.Builder, obj *types.TypeName, args *types.TypeList) {
	b.WriteString(w.qualifier(obj.Pkg()))
	if obj.Pkg() != nil && obj.Pkg() != w.pkg {
		b.WriteByte('.')
	}
	b.WriteString(obj.Name())
	if args.Len() > 0 {
		b.WriteByte('[')
		for i := range args.Len() {
			if i > 0 {
				b.WriteString(", ")
			}
			w.writeType(b, args.At(i))
		}
		b.WriteByte(']')
	}
}

// qualifier names a package other than w's by its name.
func (w *writer) qualifier(p *types.Package) string {
	if p == nil || p == w.pkg {
		return ""
	}
	return p.Name()
}

// signature is s's parameters and results, without its receiver.
func (w *writer) signature(s *types.Signature) string {
	var b strings.Builder
	w.writeSignature(&b, s)
	return b.String()
}

func (w *writer) writeSignature(b *strings.Builder, s *types.Signature) {
	w.writeTuple(b, s.Params(), s.Variadic())
	switch res := s.Results(); res.Len() {
	case 0:
	case 1:
		b.WriteByte(' ')
		w.writeType(b, res.At(0).Type())
	default:
		b.WriteByte(' ')
		w.writeTuple(b, res, false)
	}
}

func (w *writer) writeTuple(b *strings.Builder, t *types.Tuple, variadic bool) {
	b.WriteByte('(')
	for i := range t.Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		typ := t.At(i).Type()
		if variadic && i == t.Len()-1 {
			b.WriteString("...")
			typ = typ.(*types.Slice).Elem()
		}
		w.writeType(b, typ)
	}
	b.WriteByte(')')
}

// typeParams is a func's or a type's parameters with their constraints,
// [K comparable, V any], or nothing.
func (w *writer) typeParams(tps *types.TypeParamList) string {
	if tps.Len() == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('[')
	for i := range tps.Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tps.At(i).Obj().Name() + " ")
		w.writeType(&b, tps.At(i).Constraint())
	}
	b.WriteByte(']')
	return b.String()
}
