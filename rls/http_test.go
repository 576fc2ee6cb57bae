package rls

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
)

// TestJSONHandler: POST /json over a real HTTP server decides as gRPC
// does, 200 when OK and 429 when over; bad bodies, other methods and
// oversized bodies get their status, and the server goes on.
func TestJSONHandler(t *testing.T) {
	s, err := New(mustConfig(t, basic), Options{Clock: floodgate.NewManualClock(unixStart)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.JSONHandler())
	defer srv.Close()
	post := func(body string) (int, string) {
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	req := `{"domain": "d", "descriptors": [{"entries": [{"key": "small", "value": "j"}]}]}`
	for i, want := range []int{200, 200, 429} {
		code, body := post(req)
		if code != want {
			t.Fatalf("request %d: %d %s, want %d", i, code, body, want)
		}
		if i == 0 && !strings.Contains(body, `"limitRemaining":1`) {
			t.Fatalf("first answer %s, want limitRemaining 1", body)
		}
	}
	for name, tc := range map[string]struct {
		body string
		code int
	}{
		"not JSON":       {"{", 400},
		"unknown field":  {`{"domain": "d", "nope": 1}`, 400},
		"empty domain":   {`{"descriptors": [{"entries": [{"key": "k"}]}]}`, 400},
		"no descriptors": {`{"domain": "d"}`, 400},
		"over 4 MiB":     {`{"domain": "` + strings.Repeat("x", maxJSONBody) + `"}`, 413},
	} {
		if code, body := post(tc.body); code != tc.code {
			t.Errorf("%s: %d %s, want %d", name, code, body, tc.code)
		}
	}
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Fatalf("GET: %d, want 405", resp.StatusCode)
	}
	if code, _ := post(`{"domain": "d", "descriptors": [{"entries": [{"key": "big", "value": "j"}]}]}`); code != 200 {
		t.Fatalf("after the bad requests: %d", code)
	}
}
