// Package rls is Envoy's rate-limit service on floodgate: a server of
// envoy.service.ratelimit.v3.RateLimitService that reads
// envoyproxy/ratelimit's configuration (a Config, loaded by LoadOptions)
// and decides each descriptor by a policy of a floodgate.Store (in
// process by default, or redislimit's on Redis, shared by every
// replica), so that a deployment of that server can swap its image and
// keep its config.
//
//	opts := rls.LoadOptions{MergeDomains: true}
//	files, err := opts.ReadDir("/srv/runtime_data/current/config", true)
//	if err != nil { ... }
//	cfg, err := opts.Load(files)
//	if err != nil { ... } // the file and line of the first error
//	srv, err := rls.New(cfg, rls.Options{})
//	if err != nil { ... }
//	defer srv.Close()
//	ratelimitv3.RegisterRateLimitServiceServer(grpcServer, srv) // envoy/service/ratelimit/v3
//
// LoadOptions.Watch loads the directory again whenever its files change,
// and SetConfig puts each new Config in force while the Server serves;
// LoadOptions.LoadXDS reads an xDS push (RateLimitConfig resources, as
// Envoy Gateway serves them) as the YAML that envoyproxy/ratelimit
// converts it to would load, from its bytes with no text between.
//
// # The configuration
//
// A file holds one domain and its descriptors, nested; a descriptor has a
// key, an optional value (which may hold * wildcards), an optional
// rate_limit (unit, requests_per_unit, unlimited, name, replaces), and
// shadow_mode, quota_mode, detailed_metric and share_threshold. floodgate
// adds two keys to rate_limit: algorithm (token_bucket, leaky_bucket,
// fixed_window, sliding_counter or sliding_log; fixed_window when unset,
// on envoyproxy/ratelimit's epoch-aligned windows) and burst (the
// buckets' capacity; requests_per_unit when unset). A descriptor gets the
// rule that server gives it.
//
// Loading is strict: an unknown key, a value of the wrong type, an empty
// domain or key, a duplicate domain or descriptor, an unknown unit, a
// unit beside unlimited, a bad replaces entry, share_threshold without a
// wildcard, or a floodgate key that does not apply is an error that
// names the file and the line. So are envoyproxy/ratelimit's keys that
// floodgate-rls does not implement (value_to_metric, and metadata, which
// its main branch added after the version floodgate-rls follows): a
// config that relies on them fails to load rather than being decided
// otherwise.
//
// The YAML is read by a reader of the part of YAML that configurations
// are written in: block and flow mappings and sequences, plain and quoted
// scalars on one line, comments, and one document. Anchors, aliases,
// tags, block scalars (| and >), scalars over several lines, and tabs
// outside quoted text and comments are errors that name them. The reader
// checks the file's shape as it reads, so that a file of the wrong shape
// is refused at its first wrong node, and what a load costs is a small
// multiple of the files' bytes (see LoadOptions.Load).
//
// # Deciding
//
// Where it answers as envoyproxy/ratelimit answers:
//
//   - a descriptor gets the rule that server gives it (exact value, then
//     wildcards, then the key alone; a rule only at its own depth;
//     replaces; unlimited; per-descriptor limit overrides);
//   - each status carries the rule (current_limit), what is left of it
//     (limit_remaining) and the seconds until its window ends
//     (duration_until_reset), and the RateLimit headers when asked;
//   - hits_addend: the request's, 0 meaning 1, unless a descriptor sets
//     its own, where 0 checks without charging, and refuses while the key
//     owes;
//   - STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT (Options.StopIncrementOverLimit),
//     unset by default as there: every hit is charged, one past the limit
//     too, which leaves its key owing and refusing until the debt is paid
//     (a fixed window's at its end), so that the tokens an AI gateway
//     sends when a stream ends are always counted;
//   - shadow_mode per rule, and Options.Shadow for every rule.
//
// Where it decides otherwise, by design:
//
//   - Exact. A descriptor never passes more than its rule, at any
//     concurrency; envoyproxy/ratelimit counts with INCRBY after a GET,
//     and over-admits when requests race between the two.
//   - With StopIncrementOverLimit, a denied hit is charged nothing, where
//     that server, even with the setting, charges the descriptor that
//     goes over: a later, smaller request that fits is refused there and
//     admitted here. And all or nothing: a request whose descriptor goes
//     over its limit leaves no charge in its other descriptors; a shadow
//     rule never holds the others back.
//   - Every floodgate algorithm, named in the config's rate_limit; the
//     default, fixed_window, is that server's epoch-aligned window.
//   - A reload keeps what each key has left, capped by the new limit
//     (floodgate's SetRule): a limit raised mid-window gives a spent key
//     nothing more until its window ends, where envoyproxy/ratelimit
//     keeps its counter and lets the difference pass at once.
//   - A descriptor's values are counted under a key that prefixes each by
//     its length, so that values holding "_" never make two descriptors
//     one count.
//   - detailed_metric's series, one for each pair of a rule's first two
//     key_value in the requests, are bounded by Options.MaxDetailed a
//     rule, and their names at 256 bytes; past either a request counts
//     in the rule's own series, so that values a client makes up cannot
//     grow the metrics without end.
package rls
