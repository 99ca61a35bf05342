package emulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice/internal/emutest"
)

// xaiItems is an add-requests body of n chat requests named prefix-i.
func xaiItems(prefix string, n int) []byte {
	var items []string
	for i := 0; i < n; i++ {
		items = append(items, fmt.Sprintf(`{"batch_request_id":"%s-%d","batch_request":{"chat_get_completion":{"model":"grok-4-fast","messages":[{"role":"user","content":"q%d"}]}}}`, prefix, i, i))
	}
	return []byte(`{"batch_requests":[` + strings.Join(items, ",") + `]}`)
}

// TestXAIWire drives the xAI family by raw HTTP as the docs describe it:
// a batch created by name (one a second), requests added (each id once,
// at most 25 MB a call), counts without a status, done when none is
// pending, results and request states paginated, cancel by :cancel; and
// every error in the {"code","error"} envelope.
func TestXAIWire(t *testing.T) {
	t.Parallel()
	clock := emutest.NewClock()
	_, ts := start(t, Options{Now: clock.Now, BatchTime: 10 * time.Second, APIKey: "k"})
	base := ts.URL + xaiPrefix
	auth := map[string]string{"Authorization": "Bearer k"}
	call := func(method, path string, body []byte, want int) map[string]any {
		t.Helper()
		code, _, b := emutest.Do(t, method, base+path, body, auth)
		if code != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, code, b, want)
		}
		var m map[string]any
		emutest.MustUnmarshal(t, b, &m)
		if code != 200 && (m["code"] == nil || m["error"] == nil) {
			t.Fatalf("%s %s: error %s not in the {code, error} envelope", method, path, b)
		}
		return m
	}
	if code, _, b := emutest.Do(t, "GET", base+"/batches", nil, map[string]string{"Authorization": "Bearer nope"}); code != 401 || !strings.Contains(string(b), `"error"`) {
		t.Fatalf("wrong key: %d %s", code, b)
	}
	call("POST", "/batches", []byte(`{}`), 400) // no name
	b := call("POST", "/batches", []byte(`{"name":"sluice-job-c1-a1-dabc"}`), 200)
	id := b["batch_id"].(string)
	call("POST", "/batches", []byte(`{"name":"second"}`), 429) // one a second
	clock.Advance(time.Second)
	call("POST", "/batches", []byte(`{"name":"second"}`), 200)

	call("POST", "/batches/"+id+"/requests", xaiItems("r", 3), 200)
	call("POST", "/batches/"+id+"/requests", xaiItems("r", 1), 400) // r-0 is there
	call("POST", "/batches/"+id+"/requests", []byte(`{"batch_requests":[{"batch_request_id":"x","batch_request":{}}]}`), 400)
	big := bytes.Repeat([]byte(" "), xaiAddBytes+1)
	call("POST", "/batches/"+id+"/requests", big, 413)
	clock.Advance(2 * time.Second)
	call("POST", "/batches/"+id+"/requests", xaiItems("s", 4), 200)

	st := call("GET", "/batches/"+id, nil, 200)["state"].(map[string]any)
	if st["num_requests"] != 7.0 || st["num_pending"] != 7.0 {
		t.Fatalf("state %v, want 7 requests, 7 pending", st)
	}
	reqs := call("GET", "/batches/"+id+"/requests?limit=5", nil, 200)
	if len(reqs["batch_request_metadata"].([]any)) != 5 || reqs["pagination_token"] == nil {
		t.Fatalf("requests page %v", reqs)
	}
	clock.Advance(9 * time.Second) // the first segment (added 2 s earlier) is done, the second is not
	st = call("GET", "/batches/"+id, nil, 200)["state"].(map[string]any)
	if st["num_success"] != 3.0 || st["num_pending"] != 4.0 {
		t.Fatalf("state %v, want 3 done, 4 pending", st)
	}
	clock.Advance(2 * time.Second)
	st = call("GET", "/batches/"+id, nil, 200)["state"].(map[string]any)
	if st["num_success"] != 7.0 || st["num_pending"] != 0.0 {
		t.Fatalf("state %v, want all 7 done", st)
	}
	seen := map[string]bool{}
	token := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("results never end")
		}
		m := call("GET", "/batches/"+id+"/results?limit=3&pagination_token="+token, nil, 200)
		for _, r := range m["results"].([]any) {
			row := r.(map[string]any)
			chat := row["batch_result"].(map[string]any)["response"].(map[string]any)["chat_get_completion"].(map[string]any)
			if chat["object"] != "chat.completion" {
				t.Fatalf("row %v", row)
			}
			seen[row["batch_request_id"].(string)] = true
		}
		if m["pagination_token"] == nil {
			break
		}
		token = m["pagination_token"].(string)
	}
	if len(seen) != 7 {
		t.Fatalf("results of %d requests, want 7", len(seen))
	}

	// Cancel: requests not yet run are CANCELLED; no more can be added.
	clock.Advance(time.Second)
	c := call("POST", "/batches", []byte(`{"name":"to-cancel"}`), 200)["batch_id"].(string)
	call("POST", "/batches/"+c+"/requests", xaiItems("c", 2), 200)
	m := call("POST", "/batches/"+c+":cancel", nil, 200)
	if m["cancel_time"] == nil {
		t.Fatalf("cancelled batch %v", m)
	}
	call("POST", "/batches/"+c+"/requests", xaiItems("d", 1), 400)
	clock.Advance(2 * time.Second)
	st = call("GET", "/batches/"+c, nil, 200)["state"].(map[string]any)
	if st["num_cancelled"] != 2.0 || st["num_pending"] != 0.0 {
		t.Fatalf("cancelled state %v", st)
	}
	rows := call("GET", "/batches/"+c+"/results", nil, 200)["results"].([]any)
	raw, _ := json.Marshal(rows)
	if len(rows) != 2 || !strings.Contains(string(raw), `"code":1`) {
		t.Fatalf("cancelled results %s", raw)
	}
	call("POST", "/batches/nope:cancel", nil, 404)
	list := call("GET", "/batches?limit=2", nil, 200)
	if len(list["batches"].([]any)) != 2 || list["pagination_token"] == nil {
		t.Fatalf("list %v", list)
	}
	if got := list["batches"].([]any)[0].(map[string]any)["name"]; got != "to-cancel" {
		t.Fatalf("list not newest first: %v", got)
	}
}

// TestXAIPersisted: an emulator restarted on its DataDir keeps its xAI
// batches, their requests and their results.
func TestXAIPersisted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, ts := start(t, Options{DataDir: dir})
	code, _, b := emutest.Do(t, "POST", ts.URL+xaiPrefix+"/batches", []byte(`{"name":"p"}`), nil)
	if code != 200 {
		t.Fatalf("create: %d %s", code, b)
	}
	var m map[string]any
	emutest.MustUnmarshal(t, b, &m)
	id := m["batch_id"].(string)
	if code, _, b := emutest.Do(t, "POST", ts.URL+xaiPrefix+"/batches/"+id+"/requests", xaiItems("p", 2), nil); code != 200 {
		t.Fatalf("add: %d %s", code, b)
	}
	_, ts2 := start(t, Options{DataDir: dir})
	code, _, b = emutest.Do(t, "GET", ts2.URL+xaiPrefix+"/batches/"+id+"/results", nil, nil)
	if code != http.StatusOK || strings.Count(string(b), "chat_get_completion") != 2 {
		t.Fatalf("after restart: %d %s", code, b)
	}
	if code, _, b := emutest.Do(t, "POST", ts2.URL+xaiPrefix+"/batches/"+id+"/requests", xaiItems("p", 1), nil); code != 400 {
		t.Fatalf("a known id added again after restart: %d %s", code, b)
	}
}
