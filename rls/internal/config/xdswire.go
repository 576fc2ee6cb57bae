package config

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// This file walks the fields of a push's messages as they are on the
// wire, allocating nothing, and checks their wire types.

// xdsField is one field of a message's bytes.
type xdsField struct {
	num  protowire.Number
	typ  protowire.Type
	v    uint64 // a varint's value
	data []byte // a length-delimited field's bytes
}

// xdsIter walks a message's fields in order, allocating nothing.
type xdsIter struct {
	msg []byte
	f   xdsField
	err error
}

// next moves to the next field, and reports whether there is one; at
// the end, err is set if the bytes did not parse.
func (it *xdsIter) next() bool {
	if len(it.msg) == 0 || it.err != nil {
		return false
	}
	num, typ, n := protowire.ConsumeTag(it.msg)
	if n < 0 {
		it.err = errors.New("the message's bytes do not parse")
		return false
	}
	it.msg = it.msg[n:]
	it.f = xdsField{num: num, typ: typ}
	switch typ {
	case protowire.VarintType:
		it.f.v, n = protowire.ConsumeVarint(it.msg)
	case protowire.BytesType:
		it.f.data, n = protowire.ConsumeBytes(it.msg)
	default:
		n = protowire.ConsumeFieldValue(num, typ, it.msg)
	}
	if n < 0 {
		it.err = errors.New("the message's bytes do not parse")
		return false
	}
	it.msg = it.msg[n:]
	return true
}

// want is the error of a field of the wrong wire type, or nil.
func (f *xdsField) want(typ protowire.Type, name string) error {
	if f.typ != typ {
		return fmt.Errorf("%s: wire type %d", name, f.typ)
	}
	return nil
}

// text is the error of a string field of the wrong wire type or not in
// UTF-8, or nil.
func (f *xdsField) text(name string) error {
	if err := f.want(protowire.BytesType, name); err != nil {
		return err
	}
	if !utf8.Valid(f.data) {
		return fmt.Errorf("%s: not UTF-8", name)
	}
	return nil
}
