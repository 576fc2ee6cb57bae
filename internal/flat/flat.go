package flat

import (
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/floodgate-go/floodgate/internal/word"
	"golang.org/x/sys/cpu"
)

// Marks in a slot's hi: an empty slot ends a probe; a tombstone is a key
// removed, which a probe passes over. Slots are never reused within one
// table, so a request that found a key's slot can never meet another key's
// state there: only a migration to a new table frees tombstones.
const (
	emptyHi = 0
	tombHi  = 2
)

// bucket is one cache line of a table: three keys' identities and their
// state words. A state that fits one word (a token bucket, a window)
// lives in w itself, so that finding a key and deciding its request touch
// one line; any other state lives behind the table's parallel pointers,
// and w then only carries the table's marks. Words come first, so that
// each is 8-byte aligned; the bucket is 64 bytes and the table aligns it
// to a line.
type bucket struct {
	w  [slotsPerBucket]atomic.Uint64
	hi [slotsPerBucket]atomic.Uint64
	lo [slotsPerBucket]atomic.Uint32
	_  uint32
}

const (
	slotsPerBucket = 3
	// A slot index is bucket<<2 | position, so that no request divides.
	slotShift = 2
	slotMask  = 1<<slotShift - 1
)

// Table is one generation of a shard's slots. Origin is the instant (or
// window index) that inline words are relative to; it changes only when a
// rebase moves the shard to a new table. Aux is the user's: what its words
// mean (floodgate keeps the rule there, so that a word and the rule it is
// read with always come from one table); a resize and a rebase keep it,
// and only Convert gives a new table another. Both are set before the
// table is published and never written again, so a request reads them
// without synchronisation; they sit beside b and n, on the line a lookup
// loads anyway.
type Table struct {
	b       []bucket
	n       uint64                // len(b)
	Origin  int64                 // what inline words are relative to
	Aux     unsafe.Pointer        // the user's: what the words mean
	ptrs    []unsafe.Pointer      // parallel to the slots, for states held out of line
	next    atomic.Pointer[Table] // set before the first slot is marked Moved
	serials []uint32              // three a bucket, once the Flat keeps them (see Serial)
}

// Word returns the state word of slot i.
func (t *Table) Word(i int) *atomic.Uint64 { return &t.b[i>>slotShift].w[i&slotMask] }

// Ptr returns the out-of-line state of slot i.
func (t *Table) Ptr(i int) unsafe.Pointer { return atomic.LoadPointer(&t.ptrs[i]) }

// Serial returns the serial of the key in slot i: a number that its shard
// gives each key it creates, and again each key that Convert moves, and
// that a resize or a rebase keeps. So one key's serial tells its lives
// apart: a grant held across a request (a reservation) keeps its key's
// ID and serial rather than its table, and finds the key again at its
// return, in whatever table holds it by then, or finds that it was
// removed and made again meanwhile, or converted, when the serial differs.
// A table that a grant kept would stay in memory as long as the grant is
// held, and with it every table its shard has made since (each points to
// its successor): under MaxKeys churn, one every few thousand new keys.
// Serials are 32 bits: one key's two lives have the same serial only
// when its shard gave a multiple of 2^32 serials in between. A table of
// a Flat that keeps no serials (see KeepSerials) returns 0, which is no
// key's serial.
func (t *Table) Serial(i int) uint32 {
	if t.serials == nil {
		return 0
	}
	return t.serials[i>>slotShift*slotsPerBucket+i&slotMask]
}

// ID returns the identity held in slot i, as far as the table keeps it.
func (t *Table) ID(i int) ID {
	b, j := &t.b[i>>slotShift], i&slotMask
	return ID{b.hi[j].Load(), uint64(b.lo[j].Load())}
}

func (t *Table) hi(i int) uint64 { return t.b[i>>slotShift].hi[i&slotMask].Load() }

// home maps an ID onto [0, n) by a multiply, so that a table can have any
// number of buckets, not only a power of two: growth by half keeps the
// load between 0.5 and 0.75. It reads only Hi, which the table keeps whole,
// so that a migration finds every key's home again; the rotation moves the
// top bits, which chose the shard, out of the way.
func (t *Table) home(id ID) uint64 {
	h, _ := bits.Mul64(bits.RotateLeft64(id.Hi, 32), t.n)
	return h
}

// Lookup returns the slot holding id, or -1. It reads the probed buckets'
// identities and writes nothing. A key lives in the first bucket from its
// home that had a free slot when it came, in the first free slot there,
// and a slot once taken is never empty again in that table: an empty slot
// ends the probe. A table is never full, so a probe ends.
func (t *Table) Lookup(id ID) int {
	lo := uint32(id.Lo)
	i := t.home(id)
	for {
		b := &t.b[i]
		for j := range slotsPerBucket {
			h := b.hi[j].Load()
			if h == id.Hi && b.lo[j].Load() == lo {
				return int(i)<<slotShift | j
			}
			if h == emptyHi {
				return -1
			}
		}
		if i++; i == t.n {
			i = 0
		}
	}
}

// free returns the first empty slot on id's probe path.
func (t *Table) free(id ID) int {
	i := t.home(id)
	for {
		for j := range slotsPerBucket {
			if t.b[i].hi[j].Load() == emptyHi {
				return int(i)<<slotShift | j
			}
		}
		if i++; i == t.n {
			i = 0
		}
	}
}

// slots returns the number of slot indexes, bucket by bucket (some of them
// are not slots: i&slotMask == slotsPerBucket).
func (t *Table) slots() int { return int(t.n) << slotShift }

// put writes id, its state and its serial into the empty slot i; the
// identity last, so that a reader that sees it sees the rest.
func (t *Table) put(i int, id ID, w uint64, p unsafe.Pointer, serial uint32) {
	b, j := &t.b[i>>slotShift], i&slotMask
	b.w[j].Store(w)
	if t.ptrs != nil {
		atomic.StorePointer(&t.ptrs[i], p)
	}
	if t.serials != nil {
		t.serials[i>>slotShift*slotsPerBucket+j] = serial
	}
	b.lo[j].Store(uint32(id.Lo))
	b.hi[j].Store(id.Hi)
}

// Hooks is what a Flat table asks of the states it holds.
type Hooks struct {
	// Rebase translates a live inline word of table old to origin to,
	// with the same Aux. Nil for tables whose states live out of line.
	Rebase func(old *Table, w uint64, to int64) uint64
	// Spent returns, reading and changing nothing, the instant from which
	// the state in slot i of t would answer as a new one does (at or
	// before now for an idle key). Eviction at the bound takes the
	// sampled key with the earliest.
	Spent func(t *Table, i int, now int64) int64
	// Evict retires the state in slot i of t for good, whatever it holds,
	// as one atomic step with respect to its grants, and remembers what it
	// held (see floodgate's MaxKeys). The table then removes the slot.
	Evict func(t *Table, i int, now int64)
	// Retire, if not nil, replaces Spent and Evict at the bound, for
	// states that must never be evicted while they hold something (an
	// in-flight limit's held slots, which nothing could remember): it
	// retires the state in slot i of t, in one atomic step with respect
	// to its grants, only if it holds nothing, and reports whether it
	// did. A new key at the bound then takes the place of the first key
	// that Retire accepts, from a random slot on; if none does, the new
	// key is not created.
	Retire func(t *Table, i int) bool
}

// Flat maps IDs to states in sharded open-addressing tables with linear
// probing. Readers take no lock and write no shared memory: a lookup is a
// hash, a load of the shard's table pointer (read-only between resizes),
// and a probe that usually ends in the first slot, whose state word sits
// beside the ID. Writers that add or remove keys take their shard's lock;
// grants never do, they CAS the state word.
//
// A resize or a rebase builds a new table under the shard's lock and moves
// each slot with a CAS of its word to word.Moved, after copying the word
// it replaces: a grant that lands before the CAS is copied with it, and
// one that comes after finds Moved and follows the table's successor. So
// readers never wait, and no grant is lost.
type Flat struct {
	shards []flatShard
	shift  uint
	bound  int // keys per shard at most; 0 means unbounded
	ptrs   bool
	hooks  Hooks
}

type flatShard struct {
	table atomic.Pointer[Table] // read by every request: on a line of its own
	_     cpu.CacheLinePad
	mu    sync.Mutex
	live  atomic.Int64 // keys held; written under mu, read by Len
	used  uint64       // live slots and tombstones of the table, under mu
	rng   uint64       // sampling state for eviction at the bound, under mu
	// serial is the last serial given (see Table.Serial), under mu; keep
	// says that the shard's tables keep serials (see KeepSerials).
	serial uint32
	keep   bool
	_      cpu.CacheLinePad
}

// nextSerial returns a new serial, never 0. Under the lock.
func (sh *flatShard) nextSerial() uint32 {
	if sh.serial++; sh.serial == 0 {
		sh.serial = 1
	}
	return sh.serial
}

// minBuckets is the size of a new shard's table.
const minBuckets = 2

// FlatConfig configures a Flat table.
type FlatConfig struct {
	// Shards: 0 picks four per GOMAXPROCS, at most 64, fewer when MaxKeys
	// is small, so that each shard may hold at least 64 keys.
	Shards int
	// MaxKeys bounds the keys held: each of the S shards holds at most
	// MaxKeys/S, so Len never exceeds MaxKeys. 0 means unbounded.
	MaxKeys int
	// Pointers makes room for a state out of line in every slot.
	Pointers bool
	// Origin is the first table's origin (see Table).
	Origin int64
	// Aux is the first table's Aux (see Table).
	Aux unsafe.Pointer
	// Hooks is what the table asks of the states it holds.
	Hooks Hooks
}

// NewFlat returns an empty table. A Flat may be copied (it holds its shards
// by reference), so that a user can keep it by value and save a load.
func NewFlat(c FlatConfig) Flat {
	n := c.Shards
	if n <= 0 {
		n = min(4*runtime.GOMAXPROCS(0), 64)
	}
	shards := 1
	for shards < n {
		shards *= 2
	}
	for c.MaxKeys > 0 && shards > 1 && c.MaxKeys/shards < 64 {
		shards /= 2
	}
	f := Flat{shards: make([]flatShard, shards), shift: uint(64 - bits.TrailingZeros(uint(shards))),
		ptrs: c.Pointers, hooks: c.Hooks}
	if c.MaxKeys > 0 {
		f.bound = max(1, c.MaxKeys/shards)
	}
	for i := range f.shards {
		f.shards[i].table.Store(newTable(minBuckets, c.Origin, c.Aux, c.Pointers, false))
		f.shards[i].rng = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	return f
}

// newTable makes a table of n buckets, aligned to a cache line: a bucket
// must be one line, or a lookup would touch two; with serials, it keeps
// its keys' (see Table.Serial).
func newTable(n uint64, origin int64, aux unsafe.Pointer, ptrs, serials bool) *Table {
	raw := make([]bucket, n+1)
	off := (lineSize - uintptr(unsafe.Pointer(&raw[0]))%lineSize) % lineSize
	t := &Table{b: unsafe.Slice((*bucket)(unsafe.Add(unsafe.Pointer(&raw[0]), off)), n), n: n, Origin: origin, Aux: aux}
	if ptrs {
		t.ptrs = make([]unsafe.Pointer, n<<slotShift)
	}
	if serials {
		t.serials = make([]uint32, n*slotsPerBucket)
	}
	return t
}

const lineSize = 64

func (f *Flat) shardOf(id ID) *flatShard { return &f.shards[id.Hi>>f.shift] }

// Find returns the table and slot that hold id, or a slot below 0 when id
// is absent. It takes no lock and writes nothing. A slot marked Moved is
// followed into the table that replaced it. The slot's word may be Dead:
// the key is being removed, and Insert will wait for that to finish.
func (f *Flat) Find(id ID) (*Table, int) {
	t := f.shardOf(id).table.Load()
	for {
		i := t.Lookup(id)
		if i < 0 || t.Word(i).Load() != word.Moved {
			return t, i
		}
		t = t.next.Load()
	}
}

// Lookup returns the slot of id in the shard's current table, without
// following a Moved mark: the request path, where the state word's own
// check of the mark sends the rare request that meets one to Insert.
func (f *Flat) Lookup(id ID) (*Table, int) {
	t := f.Current(id)
	return t, t.Lookup(id)
}

// Current returns the current table of id's shard: Lookup in two steps,
// so that a request makes one call for both.
func (f *Flat) Current(id ID) *Table { return f.shardOf(id).table.Load() }

// Insert returns the table and slot that hold id, creating the slot if id
// is absent. Creation runs under the shard's lock, so it happens once per
// key however many goroutines race on it: init gives the new state's word
// (relative to the table's Origin) and, for tables of pointers, its state.
// If init reports false, nothing is created and the slot returned is -1.
// At the bound, a key already held is evicted first (see Flat); with
// Hooks.Retire, when no key of the shard may be retired, nothing is
// created either, and the slot is -1.
func (f *Flat) Insert(id ID, now int64, init func(t *Table) (w uint64, p unsafe.Pointer, ok bool)) (*Table, int) {
	sh := f.shardOf(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.table.Load()
	if i := t.Lookup(id); i >= 0 {
		return t, i
	}
	w, p, ok := init(t)
	if !ok {
		return t, -1
	}
	if f.bound > 0 && int(sh.live.Load()) >= f.bound && !f.evictOne(sh, t, now) {
		return t, -1 // every key of the shard is busy (Hooks.Retire)
	}
	if (sh.used+1)*4 > t.n*slotsPerBucket*3 { // above a load of 0.75
		t = f.migrate(sh, t, t.Origin)
		// A resize keeps the origin, so the word init gave stands.
	}
	var serial uint32
	if sh.keep {
		serial = sh.nextSerial()
	}
	i := t.free(id)
	t.put(i, id, w, p, serial)
	sh.used++
	sh.live.Add(1)
	return t, i
}

// evictOne removes one key of a full shard, chosen by sampling: from a
// random slot, the first eight keys (or those within 64 slots, if fewer),
// and of those the one whose state would be fresh soonest. An idle key
// (fresh already) is taken at once and costs nothing to forget; among
// busy ones, the one that leaves the least to remember. With
// Hooks.Retire, the first key from a random slot that Retire accepts; it
// reports false when the shard holds no such key.
func (f *Flat) evictOne(sh *flatShard, t *Table, now int64) bool {
	sh.rng ^= sh.rng << 13
	sh.rng ^= sh.rng >> 7
	sh.rng ^= sh.rng << 17
	n := uint64(t.slots())
	start := sh.rng % n
	if f.hooks.Retire != nil {
		return f.retireOne(sh, t, start)
	}
	best, bestAt, seen := -1, int64(math.MaxInt64), 0
	for k := uint64(0); k < n; k++ {
		if best >= 0 && (seen >= 8 || k >= 64) {
			break
		}
		i := (start + k) % n
		if i&slotMask == slotsPerBucket {
			continue
		}
		if h := t.hi(int(i)); h == emptyHi || h == tombHi {
			continue
		}
		seen++
		at := f.hooks.Spent(t, int(i), now)
		if best < 0 || at < bestAt {
			best, bestAt = int(i), at
		}
		if at <= now {
			break // idle at now: the cheapest key to forget
		}
	}
	if best < 0 {
		return false
	}
	f.hooks.Evict(t, best, now)
	f.tombstone(sh, t, best)
	return true
}

// retireOne removes the first key from slot start on, wrapping around,
// that Hooks.Retire retires, and reports whether there was one. Under the
// lock. It reads every slot when every key is busy: a shard full of keys
// that hold something costs its new keys a scan of it.
func (f *Flat) retireOne(sh *flatShard, t *Table, start uint64) bool {
	n := uint64(t.slots())
	for k := range n {
		i := int((start + k) % n)
		if i&slotMask == slotsPerBucket {
			continue
		}
		if h := t.hi(i); h == emptyHi || h == tombHi {
			continue
		}
		if f.hooks.Retire(t, i) {
			f.tombstone(sh, t, i)
			return true
		}
	}
	return false
}

// tombstone removes slot i, whose state has been retired. Under the lock.
func (f *Flat) tombstone(sh *flatShard, t *Table, i int) {
	t.b[i>>slotShift].hi[i&slotMask].Store(tombHi)
	if f.ptrs {
		atomic.StorePointer(&t.ptrs[i], nil)
	}
	sh.live.Add(-1)
}

// migrate moves the shard to a new table sized for its keys, with the given
// origin and the old table's Aux, and returns it. Under the lock; readers
// go on meanwhile.
func (f *Flat) migrate(sh *flatShard, old *Table, origin int64) *Table {
	var rebase func(old *Table, w uint64) uint64
	if f.hooks.Rebase != nil && origin != old.Origin {
		rebase = func(old *Table, w uint64) uint64 { return f.hooks.Rebase(old, w, origin) }
	}
	return f.move(sh, old, origin, old.Aux, rebase, nil, false)
}

// move is migrate with a new Aux and a translation of each slot's word
// (nil: copied as it is) and of each slot's out-of-line state (nil:
// shared by both tables); with renew, each key gets a new serial, if the
// shard keeps them, else it keeps its own. Under the lock.
func (f *Flat) move(sh *flatShard, old *Table, origin int64, aux unsafe.Pointer,
	words func(old *Table, w uint64) uint64, ptrs func(old *Table, i int, p unsafe.Pointer) unsafe.Pointer, renew bool) *Table {
	live := uint64(sh.live.Load())
	nt := newTable(max(minBuckets, (live+1)*2/slotsPerBucket), origin, aux, f.ptrs, sh.keep)
	renew = renew || old.serials == nil
	old.next.Store(nt)
	for i := range old.slots() {
		if i&slotMask == slotsPerBucket {
			continue
		}
		h := old.hi(i)
		if h == emptyHi || h == tombHi {
			continue
		}
		id := old.ID(i)
		j := nt.free(id)
		var p unsafe.Pointer
		if f.ptrs {
			p = old.Ptr(i)
			if ptrs != nil {
				p = ptrs(old, i, p)
			}
		}
		var serial uint32
		switch {
		case !sh.keep:
		case renew:
			serial = sh.nextSerial()
		default:
			serial = old.Serial(i)
		}
		// No reader looks for id in nt before its old slot says Moved, so
		// the copy may be rewritten until the CAS holds.
		src := old.Word(i)
		w := src.Load()
		for {
			nw := w
			if words != nil {
				nw = words(old, w)
			}
			nt.put(j, id, nw, p, serial)
			if src.CompareAndSwap(w, word.Moved) {
				break
			}
			w = src.Load()
		}
	}
	sh.used = live
	sh.table.Store(nt)
	return nt
}

// Convert moves every shard, one after another, to a new table with the
// given origin and Aux, translating each live word with words and each
// out-of-line state with ptrs, under the shard's lock, as a resize moves
// a shard: a grant that lands on a word before its CAS to Moved is
// translated with it, one that comes after follows the mark into the new
// table. ptrs runs once per state, under the lock; it must retire the old
// state in the same atomic step as it reads it, so that no grant lands on
// it afterwards. No lock spans the table, and readers never wait. Each
// key gets a new serial (see Table.Serial), if the Flat keeps them: a
// grant held across the change finds its key's serial changed.
func (f *Flat) Convert(origin int64, aux unsafe.Pointer, words func(old *Table, w uint64) uint64,
	ptrs func(old *Table, i int, p unsafe.Pointer) unsafe.Pointer) {
	for s := range f.shards {
		sh := &f.shards[s]
		sh.mu.Lock()
		f.move(sh, sh.table.Load(), origin, aux, words, ptrs, true)
		sh.mu.Unlock()
	}
}

// KeepSerials makes the Flat keep its keys' serials (see Table.Serial)
// from now on, if it does not already: each shard moves, one after
// another under its lock, to a table that keeps them, every key with a
// new serial. It is for a user that holds grants across requests, and
// costs it 4 bytes a slot (8 a key at the half load a table is rebuilt
// at); a Flat that never needs them pays nothing. Once it returns, a
// lookup that begins then finds only tables that keep serials.
func (f *Flat) KeepSerials() {
	for s := range f.shards {
		sh := &f.shards[s]
		sh.mu.Lock()
		if !sh.keep {
			sh.keep = true
			t := sh.table.Load()
			f.move(sh, t, t.Origin, t.Aux, nil, nil, true)
		}
		sh.mu.Unlock()
	}
}

// Rebase moves id's shard to a new table whose origin is origin, unless
// its table is no longer t (another goroutine moved it already: the
// caller reads again and asks again if it still must).
func (f *Flat) Rebase(id ID, t *Table, origin int64) {
	sh := f.shardOf(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if cur := sh.table.Load(); cur == t && origin > cur.Origin {
		f.migrate(sh, cur, origin)
	}
}

// Replace, for a table of pointers, sets id's state to swap(its current
// one) under the shard's lock, and returns what id holds afterwards, or
// nil if id is absent (swap is not called then).
func (f *Flat) Replace(id ID, swap func(cur unsafe.Pointer) unsafe.Pointer) unsafe.Pointer {
	var next unsafe.Pointer
	f.locked(id, func(_ *flatShard, t *Table, i int) {
		next = swap(atomic.LoadPointer(&t.ptrs[i]))
		atomic.StorePointer(&t.ptrs[i], next)
	})
	return next
}

// Update, for a table of pointers, calls fn with id's slot and its
// current state under the shard's lock, and reports whether id was
// present (fn is not called if not). fn may set the slot's state with set,
// and change its word, in the order it needs: a reader that sees the word
// changed after set sees the new state.
func (f *Flat) Update(id ID, fn func(t *Table, i int, cur unsafe.Pointer, set func(unsafe.Pointer))) bool {
	return f.locked(id, func(_ *flatShard, t *Table, i int) {
		fn(t, i, atomic.LoadPointer(&t.ptrs[i]), func(p unsafe.Pointer) { atomic.StorePointer(&t.ptrs[i], p) })
	})
}

// Remove calls retire on id's slot under its shard's lock, then removes
// it, and reports whether id was present.
func (f *Flat) Remove(id ID, retire func(t *Table, i int)) bool {
	return f.locked(id, func(sh *flatShard, t *Table, i int) {
		retire(t, i)
		f.tombstone(sh, t, i)
	})
}

// locked calls fn with id's slot in its shard's current table, under the
// shard's lock, and reports whether id was present (fn is not called if
// not).
func (f *Flat) locked(id ID, fn func(sh *flatShard, t *Table, i int)) bool {
	sh := f.shardOf(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.table.Load()
	i := t.Lookup(id)
	if i >= 0 {
		fn(sh, t, i)
	}
	return i >= 0
}

// DeleteIf removes every key for which pred, called under the key's shard
// lock, retires its state and reports true; it returns how many. Shards
// are visited one after another: no lock spans the table.
func (f *Flat) DeleteIf(pred func(t *Table, i int) bool) int {
	n := 0
	for s := range f.shards {
		sh := &f.shards[s]
		sh.mu.Lock()
		t := sh.table.Load()
		for i := range t.slots() {
			if i&slotMask == slotsPerBucket {
				continue
			}
			if h := t.hi(i); h == emptyHi || h == tombHi {
				continue
			}
			if pred(t, i) {
				f.tombstone(sh, t, i)
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// Len returns the number of keys held: at every instant at most MaxKeys.
func (f *Flat) Len() int {
	n := int64(0)
	for i := range f.shards {
		n += f.shards[i].live.Load()
	}
	return int(n)
}
