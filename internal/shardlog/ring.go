package shardlog

import (
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// An entry of the log is 16 bytes, changed only by a 16-byte CAS:
//
//	ts    the time the entry was charged at
//	meta  bits 62–63: seal kind (0 for a live slot); bits 38–61: the
//	      entry's index mod 2^24; bits 0–37: the cumulative cost admitted
//	      up to and including this entry, mod 2^38
//
// Entries live in a ring. The entry with index i sits in slot i mod cap and
// carries i in its meta, so a reader can tell the entry it wants from the
// one a lap earlier or later. A claim is a single CAS that replaces the
// oldest slot's 16 bytes with the new entry, checking the old content: a
// slow claimant cannot publish half an entry, nor write into a slot that
// has moved on, because its CAS then fails. Claims are taken in index
// order, so every entry below the first unclaimed index is written.
type entry struct {
	ts   atomic.Uint64
	meta atomic.Uint64
}

const (
	cumBits   = 38
	cumMask   = 1<<cumBits - 1
	seqShift  = cumBits
	seqMask   = 1<<24 - 1
	kindShift = 62

	kindLive   = 0
	kindGrow   = 1 // the ring is full of live entries: copy into one twice as large
	kindShrink = 2 // the ring is mostly expired: copy the live part into a smaller one
	kindRetire = 3 // the log is retired; the slot's ts carries the instant, or resetTS

	minRing = 2

	// resetBits in a retired slot's ts says the log was reset: the
	// successor is new at its own now. (It is math.MinInt64's bits, a time
	// no eviction can carry.)
	resetBits = uint64(1) << 63
)

func metaOf(seq, cum uint64) uint64 { return (seq&seqMask)<<seqShift | cum&cumMask }
func kindOf(m uint64) uint64        { return m >> kindShift }
func seqOf(m uint64) uint64         { return m >> seqShift & seqMask }
func cumOf(m uint64) uint64         { return m & cumMask }

// read returns a consistent snapshot of e: the meta is read on both sides
// of the time, and a slot's meta never takes the same value twice.
func read(e *entry) (int64, uint64) {
	for {
		m := e.meta.Load()
		ts := e.ts.Load()
		if e.meta.Load() == m {
			return int64(ts), m
		}
	}
}

// A logRing is one allocation: a header of ringHeader bytes, then the
// slots. The head lives in the slots, so a claim reaches it from the ring's
// address, its size and the Log's head guess (see Log.head and ringRef),
// all read from the Log's one line, with no pointer to follow in between
// and no header to read. The header's first line holds the mask, which
// look and the copies read; the hints, which claims write, sit in the
// next, so that writing one does not make every other core miss on the
// mask.
type logRing struct {
	mask uint64
	_    [7]uint64
	hint atomic.Uint64 // an index at or below the first unclaimed one

	// tail is an index at or below the boundary of every window still to
	// come: an entry known to have expired at the time of an entry already
	// in the ring, before which nothing can be charged. Searches start
	// there, so a steady log finds its boundary in a step or two.
	tail atomic.Uint64
	_    [6]uint64
}

// ringRef is a Log's reference to its ring, with the log2 of the ring's
// capacity in the low bits of the address: one load gives both, so a
// claim finds the slots without reading the ring's header, and a mask
// never comes from another ring than the address it is used with. The
// tagged address points inside the ring's allocation, which keeps it
// alive.
type ringRef struct{ p atomic.Pointer[byte] }

// ringAlign is the alignment newRing checks, which leaves the low bits of
// a ring's address free for ringRef's tag: capacities up to 2^31.
const ringAlign = 32

// tagged returns r's address plus the log2 of its capacity.
func tagged(r *logRing) *byte {
	return (*byte)(unsafe.Add(unsafe.Pointer(r), bits.TrailingZeros64(r.mask+1)))
}

// loadMask returns the ring and its mask.
func (rr *ringRef) loadMask() (*logRing, uint64) {
	p := unsafe.Pointer(rr.p.Load())
	tag := uintptr(p) % ringAlign
	return (*logRing)(unsafe.Add(p, -int(tag))), 1<<tag - 1
}

// Load returns the ring.
func (rr *ringRef) Load() *logRing {
	r, _ := rr.loadMask()
	return r
}

// Store makes r the ring.
func (rr *ringRef) Store(r *logRing) { rr.p.Store(tagged(r)) }

// CompareAndSwap replaces ring old with new, if old is the ring.
func (rr *ringRef) CompareAndSwap(old, new *logRing) bool {
	return rr.p.CompareAndSwap(tagged(old), tagged(new))
}

// ringHeader is the size of logRing, in bytes: the slots begin there.
const ringHeader = unsafe.Sizeof(logRing{})

// slot returns the slot of entry i.
func (r *logRing) slot(i uint64) *entry { return r.slotIn(i, r.mask) }

// slotIn returns the slot of entry i on a ring whose mask is mask, which
// the caller knows is r's: read with r from the Log (see ringRef), it lets
// the slot's load start without the header's.
func (r *logRing) slotIn(i, mask uint64) *entry {
	return (*entry)(unsafe.Add(unsafe.Pointer(r), ringHeader+uintptr(i&mask)*unsafe.Sizeof(entry{})))
}

// capacity returns the number of slots.
func (r *logRing) capacity() uint64 { return r.mask + 1 }

// entries returns the slots as a slice, for the tests.
func (r *logRing) entries() []entry {
	return unsafe.Slice(r.slot(0), r.capacity())
}

// hintEvery is how many claims pass between moves of the head guess
// (Log.head) while claims contend. An uncontended claim, one that found the
// guess exact and won its CAS at the first try, moves the guess on at once,
// with a plain store (see storeHint): the next claim then reads the head's
// slot and no other, where a guess a few entries behind sends a claim on
// a key that has left the cache through a scan of lines fetched one after
// another. Claims that contend move it only every hintEvery claims, since
// each move writes a line that every other core then misses on: on a hot
// key from both cores, where most claims find the guess stale, moving it
// every 16 claims costs about 3% less than every 8, and moving it on every
// claim that lost no CAS costs more than the scans it saves (measured in
// the sliding-log-rebuilt run of 2026-12-01). A claim scans forward from
// the guess, so one a few entries behind costs reads of slots, not
// correctness.
// ringHintEvery is the same for the ring's own hint, which look and the
// claims whose guess is stale start from.
const (
	hintEvery     = 16
	ringHintEvery = 32
	tailEvery     = 8 // the same for the tail (see decide)
)

// advance moves the head guess, and now and then the ring's hint, on past
// entry h, just claimed; exact says the claim was uncontended (see
// hintEvery). The ring's hint never moves back, nor past the head; the
// guess may be overwritten by a stale one (a claimant descheduled before
// it stored), which costs the next claims a scan, or, when it is ahead of
// the head, a fall back to the ring's hint.
func (l *Log) advance(r *logRing, h uint64, exact bool) {
	if exact || (h+1)%hintEvery == 0 {
		storeHint(&l.head, guess(h+1, r.mask))
	}
	if (h+1)%ringHintEvery != 0 {
		return
	}
	for {
		hint := r.hint.Load()
		if hint > h || r.hint.CompareAndSwap(hint, h+1) {
			return
		}
	}
}

// guess packs index h and a ring's mask, as its log2, into Log.head.
func guess(h, mask uint64) uint64 { return h<<6 | uint64(bits.TrailingZeros64(mask+1)) }

func newRing(capacity uint64) *logRing {
	buf := make([]entry, ringHeader/unsafe.Sizeof(entry{})+uintptr(capacity))
	r := (*logRing)(unsafe.Pointer(&buf[0]))
	r.mask = capacity - 1
	if uintptr(unsafe.Pointer(r))%ringAlign != 0 {
		panic("shardedlog: the allocator returned a ring that is not 32-byte aligned")
	}
	return r
}

// lowest returns the index of the oldest entry a ring whose head is h and
// whose mask is mask holds: h − cap once the ring has wrapped, else the
// base, 0.
func lowest(h, mask uint64) uint64 {
	if h > mask {
		return h - mask - 1
	}
	return 0
}

// sparse is the once-a-lap shrink test for a ring whose head is h, on a
// lap boundary: fewer than a sixteenth of its entries are in the window
// that ends at the newest entry, at newest, which is what a copy keeps
// (see help). That is when entry h − cap/16 has left that window. ok is
// false when that entry's slot has moved on. The slot is read meta, then
// time, as Take reads its slots: the CAS that follows on slot h, a claim's
// or a seal's, fails if that slot has changed since.
func (l *Log) sparse(r *logRing, h, mask uint64, newest int64) (sparse, ok bool) {
	j := h - (mask+1)/16
	m := r.slotIn(j, mask).meta.Load()
	ts := int64(r.slotIn(j, mask).ts.Load())
	if m>>seqShift != j&seqMask {
		return false, false
	}
	return l.p.expired(ts, newest), true
}

// shrinks reports whether the claim of head h is where a ring of that
// mask checks whether to shrink: once a lap, on rings above minRing*4.
func shrinks(h, mask uint64) bool { return h&mask == 0 && mask >= minRing*4 }

// entryAt returns the time and cumulative cost of entry j, and false if
// its slot no longer holds it (the caller's view is stale).
func (r *logRing) entryAt(j uint64) (int64, uint64, bool) {
	ts, m := read(r.slot(j))
	if seqOf(m) != j&seqMask {
		return 0, 0, false
	}
	return ts, cumOf(m), true
}

// seal closes the ring at its head so that no claim can land after it.
func (l *Log) seal(v *view, kind uint64) {
	v.from = 0 // it holds for the request's time; help searches at the newest entry's
	if cas128(v.r.slot(v.h), v.curTs, v.curMeta, v.curTs, v.curMeta|kind<<kindShift) {
		v.curMeta |= kind << kindShift
		l.help(v)
	}
}

// help finishes replacing a sealed ring: it copies the frozen entries into
// a new ring and installs it, unless another goroutine already did. Every
// helper builds the same entries, so it does not matter whose copy wins.
func (l *Log) help(v *view) {
	first := v.lo
	if kindOf(v.curMeta) == kindShrink {
		// Keep what a window ending at the newest entry can need: its
		// boundary onwards. Every later window ends no earlier.
		b, _, ok := v.boundary(&l.p, v.prevTs)
		if !ok {
			return
		}
		first = b
	}
	// Copy the boundary, the newest entry, and every entry between that
	// carries a cost: entries whose cost was refunded take no room in the
	// new ring, so refunds cannot swell a log.
	type kept struct {
		ts  int64
		cum uint64
	}
	entries := make([]kept, 0, v.h-first)
	var prevCum uint64
	for j := first; j < v.h; j++ {
		ts, cum, ok := v.r.entryAt(j) // the sealed slot still holds entry lo
		if !ok {
			return // the view was stale: the caller reads again
		}
		if j == first || j == v.h-1 || cum != prevCum {
			entries = append(entries, kept{ts, cum})
		}
		prevCum = cum
	}
	// Twice the entries kept when growing; four times when shrinking, so
	// that a window that comes back to its size after a lull does not
	// grow the ring again at once (a shrink waits for a sixteenth).
	size, need := uint64(minRing), 2*uint64(len(entries))
	if kindOf(v.curMeta) == kindShrink {
		need *= 2
	}
	for size < need {
		size *= 2
	}
	nr := newRing(size)
	for i, e := range entries {
		nr.slot(uint64(i)).ts.Store(uint64(e.ts))
		nr.slot(uint64(i)).meta.Store(metaOf(uint64(i), e.cum))
	}
	nr.hint.Store(uint64(len(entries)))
	if l.ring.CompareAndSwap(v.r, nr) {
		l.head.Store(guess(uint64(len(entries)), nr.mask))
	}
}
