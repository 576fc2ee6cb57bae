package policy

import "github.com/floodgate-go/floodgate"

// This file chooses the Store that a middleware's policies live on.

// LocalFor returns store, or, when it is nil, a new LocalStore of
// LocalStoreConfig's defaults, which the middleware owns and closes (own
// is nil otherwise).
func LocalFor(store floodgate.Store) (s floodgate.Store, own *floodgate.LocalStore) {
	if store != nil {
		return store, nil
	}
	own = floodgate.NewLocalStore(floodgate.LocalStoreConfig{})
	return own, own
}

// Remote reports whether store keeps its state outside this process: a
// face then marks each request's context (see internal/outage), so that
// the request's calls wait on a store that does not answer once.
func Remote(store floodgate.Store) bool {
	_, local := store.(*floodgate.LocalStore)
	return !local
}
