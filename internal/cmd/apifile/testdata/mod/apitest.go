// Package apitest holds one of each kind of declaration that an API file
// writes, for apifile's test.
package apitest

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"example.com/apitest/internal/hidden"
	"example.com/apitest/sub"
)

// Kind is a typed constant's type.
type Kind uint8

// The kinds.
const (
	KindA Kind = iota
	KindB
	kindC
)

// Untyped constants, one whose short form is not exact.
const (
	Limit   = 1 << 20
	Pi      = 3.14159265358979323846264338327950288419716939937510582097494459
	Name    = "apitest"
	Timeout = 5 * time.Second
)

// Vars.
var (
	ErrClosed         = errors.New("closed")
	Default, fallback Config
)

// Config has fields of every form.
type Config struct {
	MaxKeys int
	Hook    func(ctx context.Context, key string) error
	Clock   interface{ Now() int64 }
	Tags    map[string][]*Kind
	private int
	sub.Base
	traits
}

// traits's fields are promoted into Config, but for MaxKeys, which
// Config's own hides.
type traits struct {
	Promoted bool
	MaxKeys  string
}

// Traits is promoted into Config's method set.
func (traits) Traits() string { return "" }

// Store has methods on its value and its pointer.
type Store struct{ mu *sync.Mutex }

// NewStore is a func.
func NewStore(Config) (*Store, error) { return &Store{}, nil }

// AllowN is a pointer method.
func (s *Store) AllowN(ctx context.Context, key string, n int) (sub.Decision, error) {
	return sub.Decision{}, nil
}

// String is a value method.
func (s Store) String() string { return "" }

func (s *Store) close() error { return nil }

// Reader embeds an interface and has an unexported method.
type Reader interface {
	io.Reader
	Len() int
	reset()
}

// Number is a constraint.
type Number interface{ ~int | ~int64 }

// Sum is generic and variadic.
func Sum[T Number](xs ...T) T {
	var s T
	for _, x := range xs {
		s += x
	}
	return s
}

// Pair is a generic type.
type Pair[K comparable, V any] struct {
	Key   K
	Value V
}

// Get is a generic type's method.
func (p Pair[K, V]) Get() (K, V) { return p.Key, p.Value }

// Alias names another package's type.
type Alias = sub.Decision

// Thing is an internal package's type, whose fields and methods only this
// alias shows.
type Thing = hidden.Thing

// Reach returns an internal package's type.
func Reach() hidden.Thing { return hidden.Thing{} }

// Handler is a func type.
type Handler func(context.Context, ...string) error

// Pipe is a channel of channels.
type Pipe chan (<-chan int)

// Impl is an alias of an unexported type, whose methods it shows.
type Impl = impl

type impl struct{}

// Exported is counted, and has a line only through Impl.
func (impl) Exported() {}
