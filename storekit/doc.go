// Package storekit is what every floodgate.Store shares, for a backend
// written outside this module: the parts of the Store contract that do
// not depend on where the state lives, so that a new backend keeps them
// as floodgate's own Stores do, and package storetest then proves that
// it did.
//
// A Store's Decide first prepares its asks with a Plan: the asks that
// repeat a policy and key become one ask of their summed cost (Of,
// Cost), an ask whose cost no state can hold (below 1, or above its
// policy's capacity) refuses before anything is charged (Bad, Refused,
// ShadowsRefused), and the rest are the live asks (Live) that the
// backend decides, all or nothing, against its state. Plan.Prepare
// reports the errors that come before anything is charged.
//
// The backend then decides the live asks together: the enforced ones
// first, charging each, and if one refuses, giving back what the others
// took, so that no charge of a refused request is ever seen; then, if
// every enforced ask admitted and no shadow was Bad, the shadows alike,
// whose refusal charges no shadow and leaves the request admitted. An
// ask that did not charge the request and did not refuse it answers
// with what its policy would answer to one request for its key now (as
// Peek does); a Bad one with a refusal whose RetryAfter is
// floodgate.Never; a repeat with the answer of the ask it repeats (Of).
// Plan.Refusal turns the index of the live ask that refused into the
// index that Decide returns, and Verdict picks the answer that stands
// for the request.
//
// A Settler's Settle checks its arguments with CheckSettle before it
// charges anything, and a Charge or a Settle answers with the Decision
// that Owing picks. A SlotStore's Acquire returns the slots it holds as
// floodgate.Slots through HeldSlot.
//
// A backend that keeps each key's state as bytes and replaces them with
// a compare-and-swap (memcached, DynamoDB, etcd, SQL) decides a policy's
// asks with its Machine: the built-in algorithms as steps over encoded
// states (Take, Charge, Refund, Peek), each answering exactly as
// floodgate's own Limiter answers, with the instant from which the
// backend may forget a state (Fresh).
//
// A backend runs storetest.Run from a test of its own: the suite turns
// every obligation of the Store family's documentation into a subtest.
package storekit
