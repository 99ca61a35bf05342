package emulator

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice/internal/testsrv"
)

// TestVertexGCSHostFromOptions: the Vertex AI family's Cloud Storage is
// Options.GCSHost and nothing else. With STORAGE_EMULATOR_HOST naming a
// live GCS server (holding the job's input) but no GCSHost, create is
// refused 400 FAILED_PRECONDITION, in Google's envelope; a job of another
// project is 404 with the job's resource name.
func TestVertexGCSHostFromOptions(t *testing.T) {
	host, bucket := testsrv.GCS(t)
	t.Setenv("STORAGE_EMULATOR_HOST", host)
	_, ts := start(t, Options{})
	base := ts.URL + "/v1/projects/p1/locations/us-central1/batchPredictionJobs"
	body := `{"displayName":"d","model":"publishers/google/models/gemini-2.5-flash",
		"inputConfig":{"instancesFormat":"jsonl","gcsSource":{"uris":["gs://` + bucket + `/in.jsonl"]}},
		"outputConfig":{"predictionsFormat":"jsonl","gcsDestination":{"outputUriPrefix":"gs://` + bucket + `/out"}}}`
	call := func(method, url, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var e struct{ Error map[string]any }
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatalf("%s %s: %s", method, url, raw)
		}
		return resp.StatusCode, e.Error
	}
	code, e := call(http.MethodPost, base, body)
	if code != http.StatusBadRequest || e["status"] != "FAILED_PRECONDITION" || !strings.Contains(e["message"].(string), "STORAGE_EMULATOR_HOST") {
		t.Fatalf("create without GCSHost: %d %v", code, e)
	}
	code, e = call(http.MethodGet, base+"/123", "")
	if code != http.StatusNotFound || e["status"] != "NOT_FOUND" ||
		e["message"] != "The BatchPredictionJob projects/p1/locations/us-central1/batchPredictionJobs/123 does not exist." {
		t.Fatalf("get of a missing job: %d %v", code, e)
	}
}
