package emulator_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/auth"
	"google.golang.org/genai"

	. "github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/internal/check"
	"github.com/sluice-batch/sluice/internal/emutest"
	"github.com/sluice-batch/sluice/internal/testsrv"
	"github.com/sluice-batch/sluice/objstore"
)

// staticToken is an auth.TokenProvider of one OAuth2 access token.
type staticToken string

func (s staticToken) Token(context.Context) (*auth.Token, error) {
	return &auth.Token{Value: string(s), Type: "Bearer", Expiry: time.Now().Add(time.Hour)}, nil
}

// vertexClient is a google.golang.org/genai client on its Vertex AI
// backend, at base, sending token as its OAuth2 credentials.
func vertexClient(t *testing.T, base, token string) *genai.Client {
	t.Helper()
	c, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		Backend: genai.BackendVertexAI, Project: "proj-1", Location: "us-central1",
		Credentials: auth.NewCredentials(&auth.CredentialsOptions{TokenProvider: staticToken(token)}),
		HTTPOptions: genai.HTTPOptions{BaseURL: base},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestVertexSDKRoundTrip drives the emulator's Vertex AI family with
// google.golang.org/genai on its Vertex backend: input JSONL put in the
// test GCS server (fake-gcs-server), a batch prediction job created from
// it (PENDING at first), polled to SUCCEEDED, its predictions.jsonl read
// back from Cloud Storage with every key once and the echoed key
// matching the request's content; then a second job cancelled while it
// runs, list, delete, a wrong token (401) and a missing job (404).
func TestVertexSDKRoundTrip(t *testing.T) {
	clk := emutest.NewClock()
	host, bucket := testsrv.GCS(t)
	_, ts := start(t, Options{BatchTime: 10 * time.Second, Now: clk.Now, APIKey: "ya29.vertex-token", GCSHost: host})
	ctx := context.Background()
	g := check.Try(objstore.NewGCS(ctx, bucket, "", objstore.GCSOptions{Emulator: host})).Must(t, "gcs")
	const n = 50
	var in strings.Builder
	for i := range n {
		fmt.Fprintf(&in, `{"key":"k-%d","request":{"contents":[{"role":"user","parts":[{"text":"Question %d?"}]}]}}`+"\n", i, i)
	}
	check.NoErr(t, "put input", g.Put(ctx, "in/requests.jsonl", strings.NewReader(in.String())))
	c := vertexClient(t, ts.URL, "ya29.vertex-token")
	src := &genai.BatchJobSource{Format: "jsonl", GCSURI: []string{"gs://" + bucket + "/in/requests.jsonl"}}
	job := check.Try(c.Batches.Create(ctx, "gemini-2.5-flash", src, &genai.CreateBatchJobConfig{DisplayName: "sdk-job",
		Dest: &genai.BatchJobDestination{Format: "jsonl", GCSURI: "gs://" + bucket + "/out"}})).Must(t, "create")
	check.Fatal(t, "created job", job, strings.HasPrefix(job.Name, "projects/proj-1/locations/us-central1/batchPredictionJobs/"),
		job.State == genai.JobStatePending, job.DisplayName == "sdk-job", job.Model == "publishers/google/models/gemini-2.5-flash")
	clk.Advance(11 * time.Second)
	job = check.Try(c.Batches.Get(ctx, job.Name, nil)).Must(t, "get")
	out := check.Deref(job.OutputInfo).GCSOutputDirectory
	check.Fatal(t, "get", fmt.Sprintf("%+v %+v", job, job.OutputInfo), job.State == genai.JobStateSucceeded,
		job.CompletionStats != nil, check.Deref(job.CompletionStats).SuccessfulCount == n,
		job.Dest != nil, check.Deref(job.Dest).GCSURI == "gs://"+bucket+"/out",
		job.OutputInfo != nil, strings.HasPrefix(out, "gs://"+bucket+"/out/prediction-model-"))
	checkVertexPredictions(t, g, strings.TrimPrefix(out, "gs://"+bucket+"/")+"/predictions.jsonl", n)

	// A second job, cancelled while it runs: CANCELLED with code 1.
	job2 := check.Try(c.Batches.Create(ctx, "gemini-2.5-flash", src, &genai.CreateBatchJobConfig{DisplayName: "to-cancel",
		Dest: &genai.BatchJobDestination{Format: "jsonl", GCSURI: "gs://" + bucket + "/out2"}})).Must(t, "create to-cancel")
	clk.Advance(3 * time.Second)
	check.NoErr(t, "cancel", c.Batches.Cancel(ctx, job2.Name, nil))
	job2 = check.Try(c.Batches.Get(ctx, job2.Name, nil)).Must(t, "after cancel")
	code := check.Deref(job2.Error).Code
	check.Fatal(t, "after cancel", job2, job2.State == genai.JobStateCancelled, job2.Error != nil, code != nil, check.Deref(code) == 1)
	checkGenaiErr(t, "cancel of an ended job", c.Batches.Cancel(ctx, job2.Name, nil), http.StatusBadRequest, "FAILED_PRECONDITION", "")

	var names []string
	for j, err := range c.Batches.All(ctx) {
		check.NoErr(t, "list", err)
		names = append(names, j.DisplayName)
	}
	check.Fatal(t, "list", names, fmt.Sprint(names) == "[to-cancel sdk-job]")
	check.Try(c.Batches.Delete(ctx, job.Name, nil)).Must(t, "delete")
	_, err := c.Batches.Get(ctx, job.Name, nil)
	checkGenaiErr(t, "get of a deleted job", err, http.StatusNotFound, "NOT_FOUND", "")
	bad := vertexClient(t, ts.URL, "ya29.wrong")
	_, err = bad.Batches.Get(ctx, job2.Name, nil)
	checkGenaiErr(t, "wrong token", err, http.StatusUnauthorized, "UNAUTHENTICATED", "")
}

// checkVertexPredictions checks a job's predictions.jsonl at path in g:
// one success for each of the n keys, none twice, the echoed request the
// key's own, and not in input order (the service promises none, and the
// emulator shuffles to keep clients honest).
func checkVertexPredictions(t *testing.T, g *objstore.GCS, path string, n int) {
	t.Helper()
	r, _, err := g.Open(context.Background(), path)
	check.NoErr(t, "predictions", err)
	defer r.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	var order []string
	for sc.Scan() {
		var line struct {
			Key     string  `json:"key"`
			Status  *string `json:"status"`
			Request struct {
				Contents []*genai.Content `json:"contents"`
			} `json:"request"`
			Response genai.GenerateContentResponse `json:"response"`
		}
		check.NoErr(t, fmt.Sprintf("predictions line %q", sc.Text()), json.Unmarshal(sc.Bytes(), &line))
		var i int
		fmt.Sscanf(line.Key, "k-%d", &i)
		check.Fatal(t, "predictions line", sc.Text(), line.Status != nil, check.Deref(line.Status) == "", !seen[line.Key],
			len(line.Response.Candidates) == 1)
		check.Fatal(t, "predictions line", sc.Text(), line.Request.Contents[0].Parts[0].Text == fmt.Sprintf("Question %d?", i))
		seen[line.Key] = true
		order = append(order, line.Key)
	}
	check.Fatal(t, fmt.Sprintf("keys in predictions.jsonl, want %d", n), len(seen), len(seen) == n)
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("k-%d", i)
	}
	check.Error(t, "predictions come in input order: the service promises no order, and the emulator shuffles to keep clients honest",
		order, !slices.Equal(order, want))
}
