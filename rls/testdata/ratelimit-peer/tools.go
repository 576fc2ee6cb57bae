//go:build tools

package rlpeer

import _ "github.com/envoyproxy/ratelimit/src/service_cmd"
