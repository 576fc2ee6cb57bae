package keystate

import (
	"github.com/floodgate-go/floodgate/internal/decision"
	"github.com/floodgate-go/floodgate/internal/shardlog"
)

// Log is a shardlog.Log, the sliding log, seen as a State.
type Log shardlog.Log

func (s *Log) l() *shardlog.Log { return (*shardlog.Log)(s) }

func (s *Log) AllowN(now, n int64) (decision.Decision, bool) { return s.l().AllowN(now, n) }
func (s *Log) Take(now, n int64) (bool, bool)                { return s.l().Take(now, n) }
func (s *Log) Peek(now int64) (decision.Decision, bool)      { return s.l().Peek(now) }
func (s *Log) Refund(now, n int64) bool                      { return s.l().Refund(now, n) }
func (s *Log) RetireIdle(now int64) bool                     { return s.l().RetireIdle(now) }
func (s *Log) Retire()                                       { s.l().Retire() }
func (s *Log) Evict(now int64) (int64, int64)                { return s.l().Evict(now) }
func (s *Log) Successor(now int64) State                     { return (*Log)(s.l().Successor(now)) }

func (s *Log) ChargeN(now, n int64) (decision.Decision, bool, error) {
	return s.l().ChargeN(now, n)
}

// AllowGrant is AllowN that names the entry its grant made, for an exact
// refund of part of it (RefundGrant, SettleGrant).
func (s *Log) AllowGrant(now, n int64) (decision.Decision, shardlog.Grant, bool) {
	return s.l().AllowGrant(now, n)
}

// RefundGrant gives back m of the grant g, and reports whether it did:
// it lapses (the key keeps the cost, stricter, never looser) once a later
// entry of the key was charged after it.
func (s *Log) RefundGrant(g shardlog.Grant, m int64) bool {
	ok, err := s.l().RefundGrant(g, m)
	return ok && err == nil
}

// SettleGrant is RefundGrant that also returns Peek(now)'s answer, read
// where the refund landed, and reports whether it did (else the caller
// peeks).
func (s *Log) SettleGrant(g shardlog.Grant, m, now int64) (decision.Decision, bool) {
	d, answered, err := s.l().SettleGrant(g, m, now)
	return d, answered && err == nil
}

// MutexLog is the sliding log's mutex twin, a shardlog.MutexLog, seen as
// a State. It serves "sliding_log" on architectures without a 16-byte
// CAS.
type MutexLog shardlog.MutexLog

func (s *MutexLog) l() *shardlog.MutexLog { return (*shardlog.MutexLog)(s) }

func (s *MutexLog) AllowN(now, n int64) (decision.Decision, bool) { return s.l().AllowN(now, n) }
func (s *MutexLog) Take(now, n int64) (bool, bool)                { return s.l().Take(now, n) }
func (s *MutexLog) Peek(now int64) (decision.Decision, bool)      { return s.l().Peek(now) }
func (s *MutexLog) Refund(now, n int64) bool                      { return s.l().Refund(now, n) }
func (s *MutexLog) RetireIdle(now int64) bool                     { return s.l().RetireIdle(now) }
func (s *MutexLog) Retire()                                       { s.l().Retire() }
func (s *MutexLog) Evict(now int64) (int64, int64)                { return s.l().Evict(now) }
func (s *MutexLog) Successor(now int64) State                     { return (*MutexLog)(s.l().Successor(now)) }

func (s *MutexLog) ChargeN(now, n int64) (decision.Decision, bool, error) {
	return s.l().ChargeN(now, n)
}

// AllowGrant is Log.AllowGrant.
func (s *MutexLog) AllowGrant(now, n int64) (decision.Decision, shardlog.Grant, bool) {
	return s.l().AllowGrant(now, n)
}

// RefundGrant is Log.RefundGrant.
func (s *MutexLog) RefundGrant(g shardlog.Grant, m int64) bool {
	ok, err := s.l().RefundGrant(g, m)
	return ok && err == nil
}

// SettleGrant is Log.SettleGrant.
func (s *MutexLog) SettleGrant(g shardlog.Grant, m, now int64) (decision.Decision, bool) {
	d, answered, err := s.l().SettleGrant(g, m, now)
	return d, answered && err == nil
}
