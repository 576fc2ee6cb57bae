// Package policy holds what a middleware's named policies are on a
// floodgate.Store: the part httplimit and grpclimit share.
//
// A Route is what a middleware holds for one route (an httplimit pattern,
// a grpclimit method or service, or the Default): a Set of policies of
// its own and one per tier, and the route's counts. Set.Decide decides a
// request by all of a Set's policies together, on the Store, as their
// shadow switches say, and counts it once: allowed or exempt under the
// Route, denied or shadow_denied under the policy that refused it. A
// Builder makes Routes, each policy a policy of the Store named by its
// route, tier and name, and when it replaces a middleware's Routes it
// keeps what the new ones keep: a policy with the same route, tier, name
// and algorithm keeps its Store policy and its clients' state, and takes
// a new rule by SetRule; a route with the same name keeps its counts.
package policy
