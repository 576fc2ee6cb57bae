package config

import (
	"strconv"
	"unsafe"
)

// This file holds the nodes and the text that the second reading of a
// push makes, in blocks that are made again once a descriptor has
// loaded.

// xdsMark is a place in the second reading's nodes and text, which
// release makes again.
type xdsMark struct{ cur, used, text, textGen int }

// transient is what the second reading may hold at once besides the
// Config, in bytes: its nodes (in blocks up to twice as many), its
// text, and the loader's buffers.
func (r *xdsReader) transient() int {
	return 2*r.peak*int(unsafe.Sizeof(ynode{})) + 64<<10
}

// node makes a node, from the blocks that release makes again.
func (r *xdsReader) node(kind ykind) *ynode {
	if len(r.blocks) == 0 || r.used == len(r.blocks[r.cur]) {
		if len(r.blocks) > 0 {
			r.cur++
		}
		if r.cur == len(r.blocks) {
			n := 256
			if r.cur > 0 {
				n = 2 * len(r.blocks[r.cur-1])
			}
			r.blocks = append(r.blocks, make([]ynode, n))
		}
		r.used = 0
	}
	n := &r.blocks[r.cur][r.used]
	r.used++
	n.kind = kind
	return n
}

// mark is where the nodes and the text are now.
func (r *xdsReader) mark() xdsMark {
	return xdsMark{cur: r.cur, used: r.used, text: len(r.text), textGen: r.textGen}
}

// release makes the nodes and the text made since m again: nothing
// holds them any longer.
func (r *xdsReader) release(m xdsMark) {
	for c := m.cur; c <= r.cur && c < len(r.blocks); c++ {
		from, to := 0, len(r.blocks[c])
		if c == m.cur {
			from = m.used
		}
		if c == r.cur {
			to = r.used
		}
		if from < to {
			clear(r.blocks[c][from:to])
		}
	}
	r.cur, r.used = m.cur, m.used
	if r.textGen == m.textGen {
		r.text = r.text[:m.text]
	}
}

// str is a string's node: a quoted scalar (never null or a boolean)
// that shares b's bytes.
func (r *xdsReader) str(b []byte) *ynode {
	n := r.node(yScalar)
	n.value, n.quoted = unsafe.String(unsafe.SliceData(b), len(b)), true
	return n
}

// plain is a plain scalar's node, as a number, a unit or true is
// written.
func (r *xdsReader) plain(s string) *ynode {
	n := r.node(yScalar)
	n.value = s
	return n
}

// number is v's text, from a block that release makes again.
func (r *xdsReader) number(v uint64) string {
	if cap(r.text)-len(r.text) < 20 {
		r.text = make([]byte, 0, 4<<10)
		r.textGen++
	}
	start := len(r.text)
	r.text = strconv.AppendUint(r.text, v, 10)
	b := r.text[start:]
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// ylist appends nodes to a collection: a mapping's keys and values, or
// a sequence's items.
type ylist struct{ n, last *ynode }

func (l *ylist) add(c *ynode) {
	if l.last == nil {
		l.n.first = c
	} else {
		l.last.next = c
	}
	l.last = c
}

// put adds the field key: v to the mapping l holds.
func (r *xdsReader) put(l *ylist, key string, v *ynode) {
	l.add(r.plain(key))
	l.add(v)
}

// item adds v to the sequence that seq holds, made at its first item.
func (r *xdsReader) item(seq *ylist, v *ynode) {
	if seq.n == nil {
		seq.n = r.node(ySeq)
	}
	seq.add(v)
}
