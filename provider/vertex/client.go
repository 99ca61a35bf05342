// Package vertex is the client of Vertex AI batch prediction for Gemini
// (projects.locations.batchPredictionJobs; docs/providers/vertex.md has
// the wire facts).
//
// A chunk file is the batch input JSONL, one {"key": "sluice:" +
// custom_id, "request": GenerateContentRequest} per line
// (provider.VertexCodec). Upload puts it in Cloud Storage under the
// bucket prefix (--vertex-bucket gs://BUCKET/PREFIX) as
// sluice-<job>-c<chunk>/sluice-<job>-c<chunk>-a<attempt>-d<digest>.jsonl;
// Create starts a job from it with the display name
// sluice-<job>-c<chunk>-a<attempt>-d<digest> (the chunk's content digest)
// and the output prefix sluice-<job>-c<chunk>/out-a<attempt>/, which Find
// matches in the job listing after a crash. The job's predictions.jsonl
// files are read back from Cloud Storage and mapped by the echoed key;
// Forget deletes everything under the chunk's prefix.
package vertex

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/objstore"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/compat"
	"github.com/sluice-batch/sluice/provider/gemini"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// DefaultFindWindow is how far back Find looks at jobs: the 72 hours a
// job may queue, and a margin.
const DefaultFindWindow = 96 * time.Hour

// Scope is the OAuth2 scope asked of Application Default Credentials.
const Scope = "https://www.googleapis.com/auth/cloud-platform"

// Config configures a Client. The zero Preset means the "vertex" preset.
// BaseURL is without the version, as Google's clients take it; a
// "{location}" in it is replaced by Location (the preset's
// https://{location}-aiplatform.googleapis.com; "global" is
// https://aiplatform.googleapis.com). APIKey, when set, is the OAuth2
// bearer token of every call ($GOOGLE_OAUTH_ACCESS_TOKEN); else
// Application Default Credentials. FindWindow defaults to 96 h.
type Config struct {
	provider.Config
	// APIVersion is put after the base URL (default v1).
	APIVersion string
	Project    string // GOOGLE_CLOUD_PROJECT
	Location   string // GOOGLE_CLOUD_LOCATION
	// Bucket is where chunk files and predictions live:
	// gs://BUCKET/PREFIX.
	Bucket string
	// GCS configures the Cloud Storage client of Bucket (its AccessToken
	// is APIKey).
	GCS objstore.GCSOptions
}

// Client implements sluice.Provider for Vertex AI batch prediction.
type Client struct {
	provider.Base
	version string
	parent  string // projects/{p}/locations/{l}
	store   *objstore.GCS
	bucket  string // gs://BUCKET/PREFIX/ (with the slash)
}

var _ sluice.Provider = (*Client)(nil)

// New returns a client for cfg. Without an access token it looks up
// Application Default Credentials now, and says how to provide them when
// there are none.
func New(ctx context.Context, cfg Config) (*Client, error) {
	p := cfg.Preset
	if p.Name == "" {
		p = provider.Presets[string(provider.FamilyVertex)]
	}
	name := p.Name
	if cfg.Project == "" || cfg.Location == "" {
		return nil, fmt.Errorf("provider %s: set GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION (or --vertex-project and --vertex-location)", name)
	}
	pc := cfg.Config
	pc.Preset, pc.BaseURL = p, atLocation(cmpOr(cfg.BaseURL, p.BaseURL), cfg.Location)
	wire := provider.Wire{Errors: gemini.GoogleErrors, FindWindow: DefaultFindWindow}
	base, err := provider.NewBase(pc, provider.FamilyVertex, wire)
	if err != nil {
		return nil, err
	}
	for _, v := range []string{"/v1beta1", "/v1"} {
		if strings.HasSuffix(base.URL.Path, v) {
			return nil, fmt.Errorf("provider %s: base URL %q ends in the API version; give it without (like https://us-central1-aiplatform.googleapis.com)", name, pc.BaseURL)
		}
	}
	loc, err := objstore.Parse(cfg.Bucket)
	if err != nil || !loc.GCS {
		return nil, fmt.Errorf("provider %s: --vertex-bucket %q: want gs://BUCKET/PREFIX (or --store gs://…)", name, cfg.Bucket)
	}
	gcs := cfg.GCS
	gcs.AccessToken = cfg.APIKey
	store, err := objstore.NewGCS(ctx, loc.Bucket, loc.Key, gcs)
	if err != nil {
		return nil, err
	}
	c := &Client{Base: base, version: cmpOr(cfg.APIVersion, p.APIVersion, "v1"), store: store,
		parent: "projects/" + cfg.Project + "/locations/" + cfg.Location,
		bucket: strings.TrimSuffix("gs://"+loc.Bucket+"/"+loc.Key, "/") + "/"}
	if cfg.APIKey == "" {
		hc := c.HTTPConfig(pc, wire)
		if hc.HTTP, err = adcClient(ctx, cfg.HTTP); err != nil {
			return nil, fmt.Errorf("provider %s: %w", name, err)
		}
		c.HC = httpx.New(hc)
	}
	return c, nil
}

// adcClient is an HTTP client that sends OAuth2 tokens of Application
// Default Credentials (golang.org/x/oauth2/google: GOOGLE_APPLICATION_CREDENTIALS,
// gcloud's application default credentials, the metadata server).
func adcClient(ctx context.Context, hc *http.Client) (*http.Client, error) {
	ts, err := google.DefaultTokenSource(ctx, Scope)
	if err != nil {
		return nil, fmt.Errorf("no credentials: set GOOGLE_OAUTH_ACCESS_TOKEN, or provide Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, or gcloud auth application-default login): %w", err)
	}
	if hc == nil {
		hc = httpx.DefaultHTTPClient()
	}
	return &http.Client{Transport: &oauth2.Transport{Source: ts, Base: hc.Transport}, Timeout: hc.Timeout}, nil
}

// atLocation is raw with its "{location}" put in ("{location}-" left out
// for the global location).
func atLocation(raw, location string) string {
	if location == "global" {
		raw = strings.Replace(raw, "{location}-", "", 1)
	}
	return strings.ReplaceAll(raw, "{location}", location)
}

// cmpOr is the first of vs that is not "".
func cmpOr(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func (c *Client) Capabilities() sluice.Capabilities { return sluice.Capabilities{Files: true} }

// Store is the Cloud Storage store of the bucket prefix.
func (c *Client) Store() *objstore.GCS { return c.store }

// url is base/{version}/path with query q.
func (c *Client) url(path string, q url.Values) string {
	return c.Join("/"+c.version+"/"+strings.TrimLeft(path, "/"), q)
}

// DisplayName is the display name of the job made for ref:
// sluice-<job>-c<chunk>-a<attempt>-d<digest> (provider.BaseName), which
// carries the chunk's content digest. Find matches it.
func DisplayName(ref sluice.BatchRef) string { return provider.BaseName(ref) }

// chunkDir is the key prefix of everything made for ref's chunk, every
// attempt's input and output: sluice-<job>-c<chunk>/.
func chunkDir(ref sluice.BatchRef) string {
	return "sluice-" + provider.SafeFileName(ref.Job) + "-c" + strconv.FormatInt(ref.Chunk, 10) + "/"
}

// inputKey is the key of ref's chunk file under the bucket prefix.
func inputKey(ref sluice.BatchRef) string { return chunkDir(ref) + provider.UploadName(ref) }

// outputPrefix is the gcsDestination of ref's job.
func (c *Client) outputPrefix(ref sluice.BatchRef) string {
	return c.bucket + chunkDir(ref) + "out-a" + strconv.Itoa(ref.Attempt)
}

// key is the key under the bucket prefix of a gs:// URI in it, or false.
func (c *Client) key(uri string) (string, bool) {
	k, ok := strings.CutPrefix(uri, c.bucket)
	return k, ok && k != ""
}

// Upload puts the chunk file in Cloud Storage (a resumable upload that
// appears only whole) and returns its gs:// URI. The key is named after
// ref's digest: a repeated upload writes the same bytes again.
func (c *Client) Upload(ctx context.Context, ref sluice.BatchRef) (string, error) {
	if err := c.store.PutFile(ctx, inputKey(ref), ref.Path); err != nil {
		return "", fmt.Errorf("upload chunk %d: %w", ref.Chunk, err)
	}
	return c.bucket + inputKey(ref), nil
}

var jsonHeader = http.Header{"Content-Type": {"application/json"}}

type createRequest struct {
	DisplayName string `json:"displayName"`
	Model       string `json:"model"`
	InputConfig struct {
		InstancesFormat string `json:"instancesFormat"`
		GcsSource       struct {
			URIs []string `json:"uris"`
		} `json:"gcsSource"`
	} `json:"inputConfig"`
	OutputConfig struct {
		PredictionsFormat string `json:"predictionsFormat"`
		GcsDestination    struct {
			OutputURIPrefix string `json:"outputUriPrefix"`
		} `json:"gcsDestination"`
	} `json:"outputConfig"`
	Labels map[string]string `json:"labels,omitempty"`
}

// Create starts a batch prediction job from fileID (a gs:// URI) with the
// display name naming ref. The create is not idempotent: a connection
// lost after the request was sent is settled by listing jobs before it is
// repeated, so a lost answer does not buy the job twice.
func (c *Client) Create(ctx context.Context, ref sluice.BatchRef, fileID string) (sluice.Batch, error) {
	if fileID == "" {
		return sluice.Batch{}, fmt.Errorf("create job for chunk %d: no input file", ref.Chunk)
	}
	if ref.Model == "" {
		return sluice.Batch{}, fmt.Errorf("create job for chunk %d: no model", ref.Chunk)
	}
	var req createRequest
	req.DisplayName = DisplayName(ref)
	req.Model = provider.VertexModel(ref.Model)
	req.InputConfig.InstancesFormat = "jsonl"
	req.InputConfig.GcsSource.URIs = []string{fileID}
	req.OutputConfig.PredictionsFormat = "jsonl"
	req.OutputConfig.GcsDestination.OutputURIPrefix = c.outputPrefix(ref)
	req.Labels = map[string]string{"sluice-chunk": strconv.FormatInt(ref.Chunk, 10)}
	body, err := httpx.JSONBody(req)
	if err != nil {
		return sluice.Batch{}, err
	}
	var adopted *job
	call := httpx.Call{
		Method: http.MethodPost, URL: c.url(c.parent+"/batchPredictionJobs", nil), Header: jsonHeader, Body: body,
		Reconcile: func(ctx context.Context) (bool, error) {
			j, err := c.findJob(ctx, ref)
			adopted = j
			return j != nil, err
		},
	}
	var j job
	switch err := c.HC.JSON(ctx, call, &j); {
	case errors.Is(err, httpx.ErrReconciled):
		c.Log.Info().Str("batch_id", adopted.Name).Int64("chunk", ref.Chunk).Msg("create answer lost; adopted the created job")
		return adopted.toBatch(), nil
	case err != nil:
		return sluice.Batch{}, fmt.Errorf("create job for chunk %d: %w", ref.Chunk, err)
	case j.Name == "":
		return sluice.Batch{}, fmt.Errorf("create job for chunk %d: answer carries no job name", ref.Chunk)
	}
	return j.toBatch(), nil
}

// Poll reads GET /{v}/{name}.
func (c *Client) Poll(ctx context.Context, ref sluice.BatchRef, batchID string) (sluice.Batch, error) {
	var j job
	if err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url(batchID, nil)}, &j); err != nil {
		return sluice.Batch{}, compat.NotFound("poll job "+batchID, err)
	}
	return j.toBatch(), nil
}

// Cancel asks POST /{v}/{name}:cancel, then reads the job. A job that has
// already ended (400 FAILED_PRECONDITION) is just read.
func (c *Client) Cancel(ctx context.Context, batchID string) (sluice.Batch, error) {
	call := httpx.Call{Method: http.MethodPost, URL: c.url(batchID+":cancel", nil), Header: jsonHeader, Body: httpx.BytesBody([]byte("{}"))}
	return gemini.CancelThenPoll(ctx, c.HC, call, "cancel job "+batchID, func() (sluice.Batch, error) {
		return c.Poll(ctx, sluice.BatchRef{}, batchID)
	})
}

// Fetch copies the job's prediction files (predictions*.jsonl under its
// outputInfo.gcsOutputDirectory) into dir. A job without an output
// directory (cancelled before anything ran, expired) has no results.
func (c *Client) Fetch(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, dir string) ([]string, error) {
	if b.OutputFileID == "" {
		return nil, nil
	}
	prefix, ok := c.key(strings.TrimRight(b.OutputFileID, "/") + "/")
	if !ok || !strings.HasPrefix(prefix, chunkDir(ref)) {
		return nil, fmt.Errorf("job %s wrote its output to %s, not under %s%s: refusing it", b.ID, b.OutputFileID, c.bucket, chunkDir(ref))
	}
	var keys []string
	err := c.store.List(ctx, prefix, func(in objstore.Info) error {
		if base := in.Key[strings.LastIndex(in.Key, "/")+1:]; strings.HasPrefix(base, "predictions") && strings.HasSuffix(base, ".jsonl") {
			keys = append(keys, in.Key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the predictions of job %s: %w", b.ID, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("job %s: no predictions*.jsonl under %s: %w", b.ID, b.OutputFileID, sluice.ErrNotFound)
	}
	var paths []string
	for i, k := range keys {
		p := filepath.Join(dir, provider.SafeFileName(b.ID)+"."+strconv.Itoa(i)+".predictions.jsonl")
		if err := objstore.Fetch(ctx, c.store, k, p); err != nil {
			return nil, fmt.Errorf("download the predictions of job %s: %w", b.ID, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// Forget deletes what sluice put or had written in Cloud Storage for
// ref's chunk: every attempt's input and predictions (everything under
// the chunk's prefix), and the objects fileIDs name. Jobs are kept.
func (c *Client) Forget(ctx context.Context, ref sluice.BatchRef, fileIDs ...string) error {
	var errs []error
	del := func(key string) {
		if err := c.store.Delete(ctx, key); err != nil {
			errs = append(errs, err)
		}
	}
	err := c.store.List(ctx, chunkDir(ref), func(in objstore.Info) error { del(in.Key); return nil })
	if err != nil {
		errs = append(errs, err)
	}
	for _, id := range fileIDs {
		if k, ok := c.key(id); ok && strings.HasSuffix(k, ".jsonl") && !strings.HasPrefix(k, chunkDir(ref)) {
			del(k)
		}
	}
	return errors.Join(errs...)
}
