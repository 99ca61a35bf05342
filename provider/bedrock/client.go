// Package bedrock is the client of Amazon Bedrock batch inference (model
// invocation jobs), docs/providers/bedrock.md.
//
// A chunk file is the job's input JSONL, one {"recordId": custom_id,
// "modelInput": body} per line. Upload puts it in S3 (the object store,
// objstore.S3) under PREFIX/<base>/<base>.jsonl, <base> being
// provider.BaseName(ref): sluice-<job>-c<chunk>-a<attempt>-d<digest>, so
// the key carries the chunk's content digest. Create starts the job with
// CreateModelInvocationJob through the official AWS SDK for Go v2
// (service/bedrock: SigV4 and the AWS credential chain come with it), its
// output under PREFIX/<base>/out/, with a clientRequestToken derived from
// the job, chunk, attempt and digest (ClientToken): a create repeated
// after a lost answer, or by a run after a crash, returns the job the
// first made, so a chunk is never bought twice. Find adopts a job by that
// token and by its input, the chunk's own key, in the job listing.
// Poll is GetModelInvocationJob, Cancel StopModelInvocationJob; Fetch
// downloads the job's *.jsonl.out files from S3, and Decode maps their
// records back by recordId, taking only recordIds of the chunk. Forget
// deletes everything under PREFIX/<base>/.
package bedrock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/bedrock"
	"github.com/aws/aws-sdk-go-v2/service/bedrock/types"
	"github.com/aws/smithy-go"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/objstore"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// DefaultFindWindow is how far back Find looks at jobs: a job may wait
// up to 168 hours (timeoutDurationInHours' maximum), and a margin.
const DefaultFindWindow = 8 * 24 * time.Hour

// DefaultTimeoutHours is the timeoutDurationInHours sent on create.
const DefaultTimeoutHours = 24

// Config configures a Client. The zero Preset means the "bedrock" preset.
// BaseURL is the control plane's endpoint (--base-url or
// AWS_ENDPOINT_URL_BEDROCK); empty: the SDK's, from the region. APIKey is
// not used: the AWS credential chain signs every call. Limiter, Header
// and the kit's other fields are as for every family; RateLimit bounds
// the control plane's and the runtime's calls together (default the
// preset's); FindWindow defaults to DefaultFindWindow.
type Config struct {
	provider.Config
	// RuntimeURL is the runtime's endpoint, for the realtime fallback's
	// InvokeModel and Converse calls (AWS_ENDPOINT_URL_BEDROCK_RUNTIME);
	// empty: https://bedrock-runtime.{region}.amazonaws.com.
	RuntimeURL string
	// Region is the AWS region (default: the SDK's, AWS_REGION).
	Region string
	// RoleARN is the service role Bedrock reads and writes S3 with.
	RoleARN string
	// Bucket is where chunk files go and the output comes:
	// s3://BUCKET/PREFIX. Store, when set, is that place (tests, or a
	// store the caller made); else the client opens it.
	Bucket objstore.Location
	Store  objstore.Store
	// S3 configures the S3 client the client opens (endpoint from the
	// AWS environment: objstore.EndpointFromEnv).
	S3 objstore.S3Options
	// TimeoutHours is timeoutDurationInHours (24 to 168; default 24).
	TimeoutHours int
}

// Client implements sluice.Provider for Bedrock batch inference. Its
// Base's HTTP client is not used for the control plane (the AWS SDK's
// is), but its rate limit is: one budget for the control plane and the
// runtime.
type Client struct {
	provider.Base
	api      *bedrock.Client
	rt       *httpx.Client // the runtime, for CallRealtime
	runtime  string        // its base URL
	endpoint string        // named in errors
	store    objstore.Store
	bucket   objstore.Location
	role     string
	timeout  int32
}

var _ sluice.Provider = (*Client)(nil)

// New returns a client for cfg.
func New(ctx context.Context, cfg Config) (*Client, error) {
	name := cfg.Preset.Name
	if name == "" {
		name = "bedrock"
	}
	if cfg.RoleARN == "" {
		return nil, fmt.Errorf("provider %s needs the ARN of the service role Bedrock runs the job as: --bedrock-role-arn or $SLUICE_BEDROCK_ROLE_ARN", name)
	}
	if !cfg.Bucket.S3 || cfg.Bucket.Bucket == "" {
		return nil, fmt.Errorf("provider %s needs an S3 location for its input and output: --bedrock-bucket s3://BUCKET/PREFIX (or --store s3://...)", name)
	}
	timeout := int32(cfg.TimeoutHours)
	if timeout == 0 {
		timeout = DefaultTimeoutHours
	}
	if timeout < 24 || timeout > 168 {
		return nil, fmt.Errorf("provider %s: --bedrock-timeout-hours %d: Bedrock takes 24 to 168", name, timeout)
	}
	opts := []func(*config.LoadOptions) error{}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("provider %s: AWS configuration: %w", name, err)
	}
	if awsCfg.Region == "" {
		return nil, fmt.Errorf("provider %s: no AWS region: set AWS_REGION", name)
	}
	kit := cfg.Config
	if kit.BaseURL == "" {
		kit.BaseURL = "https://bedrock." + awsCfg.Region + ".amazonaws.com" // the SDK's, for the kit
	}
	w := provider.Wire{Errors: awsErrors, FindWindow: DefaultFindWindow}
	base, err := provider.NewBase(kit, provider.FamilyBedrock, w)
	if err != nil {
		return nil, err
	}
	c := &Client{Base: base, role: cfg.RoleARN, bucket: cfg.Bucket, store: cfg.Store, timeout: timeout}
	c.bucket.Key = strings.Trim(c.bucket.Key, "/")
	r := cfg.Retry.WithDefaults()
	var doer bedrock.HTTPClient = awshttp.NewBuildableClient()
	if cfg.HTTP != nil {
		doer = cfg.HTTP
	}
	lim := c.HC.Limiter()
	c.api = bedrock.NewFromConfig(awsCfg, func(o *bedrock.Options) {
		if cfg.BaseURL != "" {
			o.BaseEndpoint = aws.String(cfg.BaseURL)
		}
		o.HTTPClient = limited{doer, lim}
		// The SDK retries 5xx, throttling and broken connections; a
		// repeated create carries the same clientRequestToken.
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = r.MaxAttempts
			so.MaxBackoff = min(r.MaxTotalWait/4+time.Millisecond, 20*time.Second)
		})
	})
	c.runtime = strings.TrimRight(cfg.RuntimeURL, "/")
	if c.runtime == "" {
		c.runtime = "https://bedrock-runtime." + awsCfg.Region + ".amazonaws.com"
	}
	transport := http.DefaultTransport
	if cfg.HTTP != nil && cfg.HTTP.Transport != nil {
		transport = cfg.HTTP.Transport
	}
	// The runtime's calls are signed with SigV4 (no key header), under
	// the same rate limit.
	rc := c.HTTPConfig(kit, w)
	rc.HTTP = &http.Client{Transport: sigv4{base: transport, creds: awsCfg.Credentials, region: awsCfg.Region}}
	rc.APIKey = ""
	c.rt = httpx.New(rc)
	c.endpoint = cfg.BaseURL
	if c.endpoint == "" {
		c.endpoint = "bedrock." + awsCfg.Region + ".amazonaws.com"
	}
	if c.store == nil {
		s3, err := objstore.NewS3(ctx, c.bucket.Bucket, "", cfg.S3)
		if err != nil {
			return nil, fmt.Errorf("provider %s: %w", c.Preset.Name, err)
		}
		c.store = s3
	}
	return c, nil
}

// Capabilities: Bedrock's quota of concurrent jobs is per model
// (LivePerModel).
func (c *Client) Capabilities() sluice.Capabilities {
	return sluice.Capabilities{Files: true, LivePerModel: true}
}

// limited sends each call (each of the SDK's attempts) once the client's
// rate limit lets it (provider/httpx's limiter, as every family's).
type limited struct {
	bedrock.HTTPClient
	lim *httpx.Limiter
}

func (l limited) Do(req *http.Request) (*http.Response, error) {
	if err := l.lim.Wait(req.Context()); err != nil {
		return nil, err
	}
	return l.HTTPClient.Do(req)
}

// dirKey is the key of everything made for ref: PREFIX/<base>.
func (c *Client) dirKey(ref sluice.BatchRef) string {
	return objstore.Join(c.bucket.Key, provider.BaseName(ref))
}

// inputKey is the key ref's chunk file is put under.
func (c *Client) inputKey(ref sluice.BatchRef) string {
	return objstore.Join(c.dirKey(ref), provider.UploadName(ref))
}

// uri is the s3:// URI of key in the bucket.
func (c *Client) uri(key string) string { return "s3://" + c.bucket.Bucket + "/" + key }

// keyOf is the key of an s3:// URI in the bucket, or "" for another
// bucket's.
func (c *Client) keyOf(uri string) string {
	k, ok := strings.CutPrefix(uri, "s3://"+c.bucket.Bucket+"/")
	if !ok {
		return ""
	}
	return k
}

// ClientToken is the clientRequestToken of ref's job made from input (the
// chunk file's s3:// URI): a digest of the job, chunk, attempt, chunk
// digest and input, in the form Bedrock takes ([a-zA-Z0-9](-*[a-zA-Z0-9])*,
// at most 256 characters). The input is in it because a job id is not
// unique across state directories: the same input run again elsewhere
// (another state directory, another --bedrock-bucket) must not be handed
// the job the first run made, whose output that run deletes when done.
func ClientToken(ref sluice.BatchRef, input string) string {
	h := sha256.Sum256([]byte(ref.Job + "\x00" + strconv.FormatInt(ref.Chunk, 10) + "\x00" +
		strconv.Itoa(ref.Attempt) + "\x00" + ref.Digest + "\x00" + input))
	return "sluice-" + hex.EncodeToString(h[:20])
}

// JobName is the jobName of ref's job: sluice-<job>-c<chunk>-a<attempt>-
// <digest prefix>, the job's name reduced to the characters and length
// Bedrock takes ([a-zA-Z0-9]{1,63}(-*[a-zA-Z0-9\+\-\.]){0,63}).
func JobName(ref sluice.BatchRef) string {
	var b strings.Builder
	for _, r := range ref.Job {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
		if b.Len() == 24 {
			break
		}
	}
	name := "sluice-" + b.String() + "-c" + strconv.FormatInt(ref.Chunk, 10) + "-a" + strconv.Itoa(ref.Attempt)
	if d := ref.Digest; d != "" {
		name += "-" + d[:min(len(d), 16)]
	}
	return name
}

// Upload puts the chunk file in S3 under its key, all or nothing, and
// returns its s3:// URI.
func (c *Client) Upload(ctx context.Context, ref sluice.BatchRef) (string, error) {
	key := c.inputKey(ref)
	if err := c.store.PutFile(ctx, key, ref.Path); err != nil {
		return "", fmt.Errorf("upload chunk %d to %s: %w", ref.Chunk, c.uri(key), storeErr(err))
	}
	return c.uri(key), nil
}

// Create starts the model invocation job of ref from fileID, the chunk's
// S3 URI: modelId from the chunk, InvokeModel or Converse as its url
// says (provider.BedrockConverse), output under PREFIX/<base>/out/,
// clientRequestToken ClientToken(ref, fileID).
func (c *Client) Create(ctx context.Context, ref sluice.BatchRef, fileID string) (sluice.Batch, error) {
	if fileID == "" {
		return sluice.Batch{}, fmt.Errorf("create job for chunk %d: no input file", ref.Chunk)
	}
	if ref.Model == "" {
		return sluice.Batch{}, fmt.Errorf("create job for chunk %d: no model", ref.Chunk)
	}
	kind := types.ModelInvocationTypeInvokeModel
	if provider.BedrockConverse(ref.URL, ref.Model) {
		kind = types.ModelInvocationTypeConverse
	}
	out, err := c.api.CreateModelInvocationJob(ctx, &bedrock.CreateModelInvocationJobInput{
		JobName:                aws.String(JobName(ref)),
		ClientRequestToken:     aws.String(ClientToken(ref, fileID)),
		ModelId:                aws.String(ref.Model),
		RoleArn:                aws.String(c.role),
		ModelInvocationType:    kind,
		TimeoutDurationInHours: aws.Int32(c.timeout),
		InputDataConfig: &types.ModelInvocationJobInputDataConfigMemberS3InputDataConfig{Value: types.ModelInvocationJobS3InputDataConfig{
			S3Uri: aws.String(fileID), S3InputFormat: types.S3InputFormatJsonl}},
		OutputDataConfig: &types.ModelInvocationJobOutputDataConfigMemberS3OutputDataConfig{Value: types.ModelInvocationJobS3OutputDataConfig{
			S3Uri: aws.String(c.uri(objstore.Join(c.dirKey(ref), "out")) + "/")}},
	})
	if err != nil {
		return sluice.Batch{}, fmt.Errorf("create job for chunk %d: %w", ref.Chunk, c.apiErr(err))
	}
	arn := aws.ToString(out.JobArn)
	if arn == "" {
		return sluice.Batch{}, fmt.Errorf("create job for chunk %d: the answer carries no jobArn", ref.Chunk)
	}
	b, err := c.Poll(ctx, ref, arn)
	if err != nil {
		// The job exists: it is recorded and polled on the schedule. A
		// create reported failed here could be given up while it runs.
		c.Log.Warn().Err(err).Str("batch_id", arn).Int64("chunk", ref.Chunk).Msg("job created; reading it failed, it is polled later")
		return sluice.Batch{ID: arn, Status: sluice.BatchValidating, ProviderStatus: string(types.ModelInvocationJobStatusSubmitted)}, nil
	}
	return b, nil
}

// Poll reads GetModelInvocationJob.
func (c *Client) Poll(ctx context.Context, ref sluice.BatchRef, batchID string) (sluice.Batch, error) {
	out, err := c.api.GetModelInvocationJob(ctx, &bedrock.GetModelInvocationJobInput{JobIdentifier: aws.String(batchID)})
	if err != nil {
		return sluice.Batch{}, notFound("poll job "+batchID, c.apiErr(err))
	}
	return c.toBatch(job{arn: out.JobArn, status: out.Status, message: out.Message, output: out.OutputDataConfig,
		total: out.TotalRecordCount, ok: out.SuccessRecordCount, failed: out.ErrorRecordCount}), nil
}

// job is what GetModelInvocationJob and the listing say alike.
type job struct {
	arn, message      *string
	status            types.ModelInvocationJobStatus
	output            types.ModelInvocationJobOutputDataConfig
	total, ok, failed *int64
}

// Statuses: Submitted, Validating and Scheduled wait; InProgress runs;
// Completed and PartiallyCompleted (records left unprocessed are missing
// from the output, and retried) end with results; Failed and Expired end;
// Stopping and Stopped are a cancel.
var statuses = map[types.ModelInvocationJobStatus]sluice.BatchStatus{
	types.ModelInvocationJobStatusSubmitted:          sluice.BatchValidating,
	types.ModelInvocationJobStatusValidating:         sluice.BatchValidating,
	types.ModelInvocationJobStatusScheduled:          sluice.BatchValidating,
	types.ModelInvocationJobStatusInProgress:         sluice.BatchInProgress,
	types.ModelInvocationJobStatusCompleted:          sluice.BatchCompleted,
	types.ModelInvocationJobStatusPartiallyCompleted: sluice.BatchCompleted,
	types.ModelInvocationJobStatusFailed:             sluice.BatchFailed,
	types.ModelInvocationJobStatusExpired:            sluice.BatchExpired,
	types.ModelInvocationJobStatusStopping:           sluice.BatchCancelling,
	types.ModelInvocationJobStatusStopped:            sluice.BatchCancelled,
}

func (c *Client) toBatch(j job) sluice.Batch {
	arn := aws.ToString(j.arn)
	b := sluice.Batch{ID: arn, ProviderStatus: string(j.status), Total: int(aws.ToInt64(j.total)),
		Completed: int(aws.ToInt64(j.ok)), Failed: int(aws.ToInt64(j.failed))}
	st, ok := statuses[j.status]
	if !ok {
		st = sluice.BatchInProgress // a status this client does not know: keep polling
	}
	b.Status = st
	switch st {
	case sluice.BatchCompleted, sluice.BatchCancelled, sluice.BatchExpired, sluice.BatchFailed:
		// The output of a job is under its output URI, in a folder named
		// after the job's id (the last part of its ARN).
		if o, ok := j.output.(*types.ModelInvocationJobOutputDataConfigMemberS3OutputDataConfig); ok && o.Value.S3Uri != nil {
			b.OutputFileID = strings.TrimRight(*o.Value.S3Uri, "/") + "/" + path.Base(arn) + "/"
		}
	}
	if st == sluice.BatchFailed || st == sluice.BatchExpired {
		b.Errors = []sluice.BatchError{{Code: string(j.status), Message: aws.ToString(j.message)}}
	}
	return b
}

// Cancel asks StopModelInvocationJob, then reads the job. A job that has
// already ended (ConflictException) is just read.
func (c *Client) Cancel(ctx context.Context, batchID string) (sluice.Batch, error) {
	_, err := c.api.StopModelInvocationJob(ctx, &bedrock.StopModelInvocationJobInput{JobIdentifier: aws.String(batchID)})
	var ae smithy.APIError
	if err != nil && !(errors.As(err, &ae) && ae.ErrorCode() == "ConflictException") {
		return sluice.Batch{}, notFound("stop job "+batchID, c.apiErr(err))
	}
	return c.Poll(ctx, sluice.BatchRef{}, batchID)
}

// Fetch downloads the ended job's *.jsonl.out files from its output
// folder into dir, and reads its manifest.json.out: a job whose record
// count is not the chunk's is reported (its records are still mapped
// only by the chunk's recordIds, Decode). A job without output (failed
// before it ran, or stopped before any record) has none: no files, no
// error.
func (c *Client) Fetch(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, dir string) ([]string, error) {
	prefix := c.keyOf(b.OutputFileID)
	if prefix == "" {
		return nil, nil
	}
	var files []string
	err := c.store.List(ctx, prefix, func(info objstore.Info) error {
		if path.Base(info.Key) == "manifest.json.out" {
			c.checkManifest(ctx, ref, b, info.Key)
			return nil
		}
		if !strings.HasSuffix(info.Key, ".jsonl.out") {
			return nil
		}
		dst := filepath.Join(dir, provider.SafeFileName(path.Base(info.Key)))
		if err := objstore.Fetch(ctx, c.store, info.Key, dst); err != nil {
			return err
		}
		files = append(files, dst)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("download the output of job %s from %s: %w", b.ID, b.OutputFileID, storeErr(err))
	}
	return files, nil
}

// checkManifest reads a job's manifest.json.out (its counts) and warns
// when its record count is not the chunk's.
func (c *Client) checkManifest(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, key string) {
	r, _, err := c.store.Open(ctx, key)
	if err != nil {
		c.Log.Warn().Err(err).Str("batch_id", b.ID).Msg("could not read the job's manifest.json.out")
		return
	}
	defer r.Close()
	var m struct {
		Total     int64 `json:"totalRecordCount"`
		Processed int64 `json:"processedRecordCount"`
		Success   int64 `json:"successRecordCount"`
		Errors    int64 `json:"errorRecordCount"`
	}
	if err := json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(&m); err != nil {
		c.Log.Warn().Err(err).Str("batch_id", b.ID).Msg("the job's manifest.json.out is not JSON")
		return
	}
	if ref.Requests > 0 && m.Total != int64(ref.Requests) {
		c.Log.Warn().Str("batch_id", b.ID).Int64("manifest_records", m.Total).Int("chunk_requests", ref.Requests).
			Msg("the job's manifest counts another number of records than the chunk holds; only the chunk's recordIds are taken")
	}
	c.Log.Debug().Str("batch_id", b.ID).Int64("processed", m.Processed).Int64("succeeded", m.Success).Int64("errors", m.Errors).Msg("job manifest")
}

// Forget deletes everything made for ref in S3: its chunk file and its
// job's output (PREFIX/<base>/), whatever ids it is given. A key already
// gone is no error.
func (c *Client) Forget(ctx context.Context, ref sluice.BatchRef, _ ...string) error {
	var keys []string
	if err := c.store.List(ctx, c.dirKey(ref)+"/", func(info objstore.Info) error {
		keys = append(keys, info.Key)
		return nil
	}); err != nil {
		return fmt.Errorf("list %s: %w", c.uri(c.dirKey(ref)+"/"), storeErr(err))
	}
	var errs []error
	for _, k := range keys {
		if err := c.store.Delete(ctx, k); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", c.uri(k), storeErr(err)))
		}
	}
	return errors.Join(errs...)
}

// apiErr is the one mapping of the SDK's errors: an answer becomes a
// *sluice.APIError with its HTTP status and the exception's name (a
// ServiceQuotaExceededException, too many jobs at once, counts as a 429:
// it passes); a connection never made (nothing sent) is
// sluice.ErrUnreachable, naming the endpoint.
func (c *Client) apiErr(err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		status := 0
		var re *awshttp.ResponseError
		if errors.As(err, &re) {
			status = re.HTTPStatusCode()
		}
		switch ae.ErrorCode() {
		case "ServiceQuotaExceededException", "ThrottlingException":
			status = http.StatusTooManyRequests
		case "AccessDeniedException", "UnrecognizedClientException", "InvalidSignatureException":
			status = http.StatusForbidden
		}
		return &sluice.APIError{Status: status, Code: ae.ErrorCode(), Message: ae.ErrorMessage()}
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return fmt.Errorf("%w: %s: %v", sluice.ErrUnreachable, c.endpoint, err)
	}
	return err
}

// storeErr gives the dispatcher the meaning of an S3 error: refused
// credentials and a missing bucket stop the run (as a refused key does),
// an endpoint that cannot be reached is unreachable.
func storeErr(err error) error {
	switch {
	case errors.Is(err, objstore.ErrCredentials):
		return &sluice.APIError{Status: http.StatusForbidden, Code: "S3AccessDenied", Message: err.Error()}
	case errors.Is(err, objstore.ErrNoBucket):
		return &sluice.APIError{Status: http.StatusForbidden, Code: "NoSuchBucket", Message: err.Error()}
	case errors.Is(err, objstore.ErrUnreachable):
		return fmt.Errorf("%w: %w", sluice.ErrUnreachable, err)
	}
	return err
}

// notFound wraps err with what, adding sluice.ErrNotFound to a 404.
func notFound(what string, err error) error {
	var ae *sluice.APIError
	if errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Code == "ResourceNotFoundException") {
		return fmt.Errorf("%s: %w: %w", what, sluice.ErrNotFound, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
