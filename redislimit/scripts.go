package redislimit

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strings"
)

//go:embed gcra.lua
var gcraSource string

//go:embed window.lua
var windowSource string

//go:embed log.lua
var logSource string

// historySource is the rule's history and the conversion of a key written
// under another rule, the same in every script: newScript puts it where a
// script says "--[[history]]", after its own convertAt and emptyAt.
//
//go:embed history.lua
var historySource string

// script is a Lua script and its SHA-1, the name EVALSHA knows it by. at is
// its test form, which reads now from its last argument instead of Redis's
// clock.
type script struct {
	src, sha string
	at       *script
}

var (
	gcraScript   = newScript(gcraSource, 9)
	windowScript = newScript(windowSource, 10)
	logScript    = newScript(logSource, 10)
)

func newScript(src string, nowArg int) *script {
	if strings.Count(src, "--[[history]]") != 1 {
		panic("redislimit: a script has no place for the history")
	}
	src = strings.Replace(src, "--[[history]]", historySource, 1)
	s := &script{src: src, sha: sha1hex(src)}
	s.at = &script{src: testForm(src, nowArg)}
	s.at.sha = sha1hex(s.at.src)
	return s
}

func sha1hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// testForm replaces a script's reading of Redis's clock, the block between
// "do -- clock" and "end -- clock", with ARGV[nowArg], checked as every
// argument is; the history then begins after it. Only tests run it: the differential tests drive the script
// and the in-process algorithm through the same instants.
func testForm(src string, nowArg int) string {
	i := strings.Index(src, "do -- clock")
	j := strings.Index(src, "end -- clock")
	if i < 0 || j < i {
		panic("redislimit: a script has no clock block")
	}
	return src[:i] + fmt.Sprintf("now = tonumber(ARGV[%d])\nif not (now and now >= 0 and now <= 2^52 and now %% 1 == 0) then return redis.error_reply('floodgate: bad now') end\non = %d", nowArg, nowArg+1) + src[j+len("end -- clock"):]
}
