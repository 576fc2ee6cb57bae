package window

// Changing a key's rule (floodgate's Limiter.SetRule). What a window holds
// at the instant T of the change is its allowance at T: the largest cost
// a request at T could take (Decision.Remaining of a Peek at T; for the
// sliding counter, N − curr − ceil(prev × (T − e) / T)), and 0 when T lies
// in a window before the state's own, which refuses every request; and
// what it owes at T, its Decision.Owed (0 unless a charge put it in
// debt). A limit lowered by d takes d from what it held (held' =
// max(0, held − max(0, N − N'))): the key has spent what it spent. The
// converted state of rule q lies in q's window of T, k' = floor(T / T'),
// with no previous count and a current count of
// N' − min(held', N') + min(owed, MaxCount' − N'): at T it holds exactly
// min(held', N'), and owes what the key owed, in units, as far as q's
// bound holds it (a debt above that bound is dropped: the count
// saturates, never wraps). From then on its windows open at the new
// period. No key gains allowance from the change; the sliding counter
// keeps the converted count one window more, weighted down as the next
// window goes by, as it does any count.

// held is the allowance and the debt of the live word w at window rel,
// offset e.
func (p *Params) held(w uint64, rel, e int64, pos position) (held, owed int64) {
	if pos == tooEarly {
		return 0, 0
	}
	d, _ := p.peek(w, rel, e, pos)
	if ks, _, _ := p.unpack(w); pos == inRange && rel < ks {
		return 0, d.Owed
	}
	if d.Allowed {
		return d.Remaining + 1, 0 // a Peek's Remaining is after its one unit
	}
	return d.Remaining, d.Owed
}

// lowered is what a key that holds held under p holds under q, before
// q's limit bounds it: held less what the limit was lowered by, at
// least 0. A key that spent part of p's limit has spent as much
// of q's, so a limit lowered by d leaves it d less.
func (p *Params) lowered(held int64, q *Params) int64 {
	return max(0, held-max(0, p.limit-q.limit))
}

// converted is the word, relative to origin q.Origin(at), of a state of
// rule q that holds held and owes owed at its window of at.
func (q *Params) converted(held, owed int64) uint64 {
	return q.pack(0, q.limit-min(held, q.limit)+min(owed, q.MaxCount()-q.limit), 0)
}

// ConvertValue returns the word, under rule q relative to origin
// q.Origin(at), of the window whose live word under p relative to origin
// is v, converted at the instant at (see above).
func (p *Params) ConvertValue(v uint64, origin, at int64, q *Params) uint64 {
	rel, e, pos := p.locate(at, origin)
	held, owed := p.held(v, rel, e, pos)
	return q.converted(p.lowered(held, q), owed)
}

// FullAt returns the instant from which a window of rule p that is spent
// at now answers as new: the end of the last window in which a count made
// at now weighs (see floodgate's MaxKeys). It is the instant of a count
// within the limit; a key whose state is known to be in debt reports its
// own, later, instant (SpentValue).
func (p *Params) FullAt(now int64) int64 {
	return p.SpentValue(p.pack(0, 1, 0), p.Origin(now))
}

// ConvertSpent returns what a key that MaxKeys evicted under rule p,
// remembered as (spent, owed) (see SpentOwed), is remembered as under
// rule q after a change at the instant at: a key that holds nothing at
// at and owes what the state made again from (spent, owed) owes there, as
// far as q's bound holds it, as a key held at the change would (see
// above). Its instant is the end of q's window of at for the fixed
// window; for the sliding counter, a window later, as for a count above
// N (see SpentValue), whether the key owes or not: the sketch's cells are
// converted one by one, and a key reads the earlier of its two, so a
// later instant must never convert to an earlier one. A spent at or
// before at is returned as it is, with nothing owed: it binds nothing
// from at on.
func (p *Params) ConvertSpent(spent, owed, at int64, q *Params) (int64, int64) {
	if spent <= at {
		return spent, 0
	}
	origin, w := p.spentState(at, spent, owed)
	rel, e, pos := p.locate(at, origin)
	_, o := p.held(w, rel, e, pos)
	o = min(o, q.MaxCount()-q.limit)
	c := q.limit + o
	if q.kind == Sliding {
		c = q.limit + max(o, min(1, q.MaxCount()-q.limit))
	}
	return q.SpentValue(q.pack(0, c, 0), q.Origin(at)), o
}

// ConvertTo retires s whatever it holds, in the same critical section as
// it reads it, and returns the window of rule q that holds what s held at
// at, converted (see above). It returns nil, and changes nothing, when s
// had retired already: its successor holds its state. The retired s names
// the new window as its Successor. A refund that meets s afterwards is
// dropped (stricter, never looser).
func (s *MutexWindow) ConvertTo(at int64, q Params) *MutexWindow {
	rel, e, pos := s.p.locate(at, s.origin)
	s.mu.Lock()
	defer s.mu.Unlock()
	if isRetired(s.word) {
		return nil
	}
	held, owed := s.p.held(s.word, rel, e, pos)
	s.next = &MutexWindow{origin: q.Origin(at), word: q.converted(s.p.lowered(held, &q), owed), p: q}
	s.word = resetWord
	return s.next
}
