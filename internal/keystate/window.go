package keystate

import (
	"github.com/floodgate-go/floodgate/internal/decision"
	"github.com/floodgate-go/floodgate/internal/window"
)

// Window is a window.Window seen as a State: the lock-free window out of
// line, as the reference limiter holds it (the Limiter holds the window's
// word inline).
type Window window.Window

func (s *Window) w() *window.Window { return (*window.Window)(s) }

func (s *Window) AllowN(now, n int64) (decision.Decision, bool) { return s.w().AllowN(now, n) }
func (s *Window) Take(now, n int64) (bool, bool)                { return s.w().Take(now, n) }
func (s *Window) Peek(now int64) (decision.Decision, bool)      { return s.w().Peek(now) }
func (s *Window) Refund(now, n int64) bool                      { return s.w().Refund(now, n) }
func (s *Window) RetireIdle(now int64) bool                     { return s.w().RetireIdle(now) }
func (s *Window) Retire()                                       { s.w().Retire() }
func (s *Window) Successor(now int64) State                     { return (*Window)(s.w().Successor(now)) }

func (s *Window) ChargeN(now, n int64) (decision.Decision, bool, error) {
	return s.w().ChargeN(now, n)
}

// MutexWindow is the windows' mutex twin, a window.MutexWindow, seen as a
// State.
type MutexWindow window.MutexWindow

func (s *MutexWindow) w() *window.MutexWindow { return (*window.MutexWindow)(s) }

func (s *MutexWindow) AllowN(now, n int64) (decision.Decision, bool) { return s.w().AllowN(now, n) }
func (s *MutexWindow) Take(now, n int64) (bool, bool)                { return s.w().Take(now, n) }
func (s *MutexWindow) Peek(now int64) (decision.Decision, bool)      { return s.w().Peek(now) }
func (s *MutexWindow) Refund(now, n int64) bool                      { return s.w().Refund(now, n) }
func (s *MutexWindow) RetireIdle(now int64) bool                     { return s.w().RetireIdle(now) }
func (s *MutexWindow) Retire()                                       { s.w().Retire() }
func (s *MutexWindow) Successor(now int64) State                     { return (*MutexWindow)(s.w().Successor(now)) }
func (s *MutexWindow) Evict(now int64) (int64, int64)                { return s.w().Evict(now) }

func (s *MutexWindow) ChargeN(now, n int64) (decision.Decision, bool, error) {
	return s.w().ChargeN(now, n)
}
