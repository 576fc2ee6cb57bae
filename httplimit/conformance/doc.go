// Package conformance holds only tests: httplimit in front of the routers
// users put it in front of (http.ServeMux, chi, gorilla/mux), attacked
// with paths that are not canonical, and its headers parsed by a
// Structured Fields parser written by someone else (dunglas/httpsfv). It
// is a module of its own, so that floodgate's core module requires no
// router.
package conformance
