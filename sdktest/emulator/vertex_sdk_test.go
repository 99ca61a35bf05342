package emulator_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/auth"
	"google.golang.org/genai"

	. "github.com/sluice-batch/sluice/emulator"
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
	g, err := objstore.NewGCS(ctx, bucket, "", objstore.GCSOptions{Emulator: host})
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	var in strings.Builder
	for i := range n {
		fmt.Fprintf(&in, `{"key":"k-%d","request":{"contents":[{"role":"user","parts":[{"text":"Question %d?"}]}]}}`+"\n", i, i)
	}
	if err := g.Put(ctx, "in/requests.jsonl", strings.NewReader(in.String())); err != nil {
		t.Fatal(err)
	}
	c := vertexClient(t, ts.URL, "ya29.vertex-token")
	src := &genai.BatchJobSource{Format: "jsonl", GCSURI: []string{"gs://" + bucket + "/in/requests.jsonl"}}
	job, err := c.Batches.Create(ctx, "gemini-2.5-flash", src, &genai.CreateBatchJobConfig{DisplayName: "sdk-job",
		Dest: &genai.BatchJobDestination{Format: "jsonl", GCSURI: "gs://" + bucket + "/out"}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if !strings.HasPrefix(job.Name, "projects/proj-1/locations/us-central1/batchPredictionJobs/") || job.State != genai.JobStatePending ||
		job.DisplayName != "sdk-job" || job.Model != "publishers/google/models/gemini-2.5-flash" {
		t.Fatalf("created job: %+v", job)
	}
	clk.Advance(11 * time.Second)
	job, err = c.Batches.Get(ctx, job.Name, nil)
	if err != nil || job.State != genai.JobStateSucceeded || job.CompletionStats == nil || job.CompletionStats.SuccessfulCount != n ||
		job.Dest == nil || job.Dest.GCSURI != "gs://"+bucket+"/out" ||
		job.OutputInfo == nil || !strings.HasPrefix(job.OutputInfo.GCSOutputDirectory, "gs://"+bucket+"/out/prediction-model-") {
		t.Fatalf("get: %+v %+v, %v", job, job.OutputInfo, err)
	}
	dir := strings.TrimPrefix(job.OutputInfo.GCSOutputDirectory, "gs://"+bucket+"/")
	r, _, err := g.Open(ctx, dir+"/predictions.jsonl")
	if err != nil {
		t.Fatalf("predictions: %v", err)
	}
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
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("predictions line %q: %v", sc.Text(), err)
		}
		var i int
		fmt.Sscanf(line.Key, "k-%d", &i)
		if line.Status == nil || *line.Status != "" || seen[line.Key] || len(line.Response.Candidates) != 1 ||
			line.Request.Contents[0].Parts[0].Text != fmt.Sprintf("Question %d?", i) {
			t.Fatalf("predictions line: %s", sc.Text())
		}
		seen[line.Key] = true
		order = append(order, line.Key)
	}
	r.Close()
	if len(seen) != n {
		t.Fatalf("%d keys in predictions.jsonl, want %d", len(seen), n)
	}
	inOrder := true
	for i, k := range order {
		inOrder = inOrder && k == fmt.Sprintf("k-%d", i)
	}
	if inOrder {
		t.Error("predictions come in input order: the service promises no order, and the emulator shuffles to keep clients honest")
	}

	// A second job, cancelled while it runs: CANCELLED with code 1.
	job2, err := c.Batches.Create(ctx, "gemini-2.5-flash", src, &genai.CreateBatchJobConfig{DisplayName: "to-cancel",
		Dest: &genai.BatchJobDestination{Format: "jsonl", GCSURI: "gs://" + bucket + "/out2"}})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(3 * time.Second)
	if err := c.Batches.Cancel(ctx, job2.Name, nil); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	job2, err = c.Batches.Get(ctx, job2.Name, nil)
	if err != nil || job2.State != genai.JobStateCancelled || job2.Error == nil || job2.Error.Code == nil || *job2.Error.Code != 1 {
		t.Fatalf("after cancel: %+v, %v", job2, err)
	}
	var apiErr genai.APIError
	if err := c.Batches.Cancel(ctx, job2.Name, nil); !errors.As(err, &apiErr) || apiErr.Code != 400 || apiErr.Status != "FAILED_PRECONDITION" {
		t.Fatalf("cancel of an ended job: %v", err)
	}

	var names []string
	for j, err := range c.Batches.All(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, j.DisplayName)
	}
	if fmt.Sprint(names) != "[to-cancel sdk-job]" {
		t.Fatalf("list: %v", names)
	}
	if _, err := c.Batches.Delete(ctx, job.Name, nil); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := c.Batches.Get(ctx, job.Name, nil); !errors.As(err, &apiErr) || apiErr.Code != http.StatusNotFound {
		t.Fatalf("get of a deleted job: %v", err)
	}
	bad := vertexClient(t, ts.URL, "ya29.wrong")
	if _, err := bad.Batches.Get(ctx, job2.Name, nil); !errors.As(err, &apiErr) || apiErr.Code != http.StatusUnauthorized || apiErr.Status != "UNAUTHENTICATED" {
		t.Fatalf("wrong token: %v", err)
	}
}
