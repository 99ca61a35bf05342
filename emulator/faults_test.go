package emulator

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice/internal/emutest"
)

func TestFault5xx(t *testing.T) {
	t.Parallel()
	_, ts := start(t, Options{HTTPFaultRate: 1, FaultKinds: []string{"500", "502", "503"}, Seed: 3})
	seen := map[int]bool{}
	for range 30 {
		code, _, body := emutest.Do(t, "GET", ts.URL+"/v1/files", nil, nil)
		var oe struct {
			Error struct{ Type string } `json:"error"`
		}
		emutest.MustUnmarshal(t, body, &oe)
		if code < 500 || oe.Error.Type != "server_error" {
			t.Fatalf("%d %s", code, body)
		}
		seen[code] = true
	}
	if !seen[500] || !seen[502] || !seen[503] {
		t.Fatalf("saw %v", seen)
	}
}

func TestSlowCalls(t *testing.T) {
	t.Parallel()
	s, ts := start(t, Options{SlowRate: 1, SlowDelay: 150 * time.Millisecond})
	t0 := time.Now()
	emutest.Do(t, "GET", ts.URL+"/v1/batches", nil, nil)
	if d := time.Since(t0); d < 150*time.Millisecond {
		t.Fatalf("call took %v", d)
	}
	if s.Stats().SlowCalls != 1 {
		t.Fatal("slow call not counted")
	}
}

func TestCloudflareItemErrorString(t *testing.T) {
	t.Parallel()
	_, ts := start(t, Options{LineErrorRate: 1, CloudflareItemErrorString: true})
	_, _, q := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"requests": []any{map[string]any{"prompt": "p"}}})
	_, _, p := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"request_id": q.RequestID})
	var msg string
	if json.Unmarshal(p.Responses[0].Error, &msg) != nil || msg == "" || p.Responses[0].Success {
		t.Fatalf("item %+v", p.Responses[0])
	}
}

// A reset happens after the call was processed: the client gets a
// connection error, yet the file was stored (the case reconciliation is for).
func TestFaultResetMidBody(t *testing.T) {
	t.Parallel()
	s, ts := start(t, Options{HTTPFaultRate: 1, FaultKinds: []string{"reset"}})
	body, ctype := emutest.MultipartUpload("sluice-j-c0-a1.jsonl", "batch", emutest.ChatLines(3, "m"))
	req, _ := http.NewRequest("POST", ts.URL+"/v1/files", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", ctype)
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		_, err = readAllErr(resp)
	}
	if err == nil {
		t.Fatal("expected a connection error")
	}
	t.Logf("client saw: %v", err)
	if st := s.Stats(); st.FilesUploaded != 1 || st.FaultsReset != 1 {
		t.Fatalf("stats %+v", st)
	}
	s.mu.Lock()
	n := len(s.files)
	s.mu.Unlock()
	if n != 1 {
		t.Fatalf("files stored: %d", n)
	}
	// That the OpenAI SDK reports it as an error too: sdktest/emulator,
	// TestFaultResetMidBodySDK.
}

func readAllErr(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			if err.Error() == "EOF" {
				return []byte(b.String()), nil
			}
			return nil, err
		}
	}
}
