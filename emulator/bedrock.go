package emulator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-batch/sluice/objstore"
)

// Amazon Bedrock's batch inference control plane (model invocation jobs)
// at /bedrock: the base URL the AWS SDKs take as the endpoint
// (AWS_ENDPOINT_URL_BEDROCK=http://HOST:PORT/bedrock), paths
// /bedrock/model-invocation-job[s]... Wire facts: docs/providers/bedrock.md.
//
// As the service does, a job reads its input from S3 and writes its
// output there: from and to the S3 server the emulator's AWS environment
// names (AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), a
// real one (versitygw, MinIO) in tests. The input is read when the job is
// created; its output (<input name>.out and manifest.json.out under
// OUTPUT_URI/<job id>/) is written when a call first sees the job ended.
// Calls are signed with SigV4 for service "bedrock"; when the emulator
// knows a secret (its own $AWS_SECRET_ACCESS_KEY, else Options.APIKey)
// the signature is checked against it.

const famBedrock = "bedrock"

// bedrockPrefix is the path of the Bedrock family's base URL, and
// bedrockRuntimePrefix that of its runtime (InvokeModel and Converse,
// for the realtime fallback: AWS_ENDPOINT_URL_BEDROCK_RUNTIME).
const (
	bedrockPrefix        = "/bedrock"
	bedrockRuntimePrefix = "/bedrock-runtime"
)

// bedrockAccount is the account id in the ARNs the emulator makes.
const bedrockAccount = "123456789012"

// bedrockMinJobTime is the least time a Bedrock job takes from create to
// its end, whatever Options.BatchTime (0: done at the first poll for the
// other families): the service takes minutes, and a job that ended at its
// first Get could never be stopped.
const bedrockMinJobTime = time.Second

var (
	bedrockJobName = regexp.MustCompile(`^[a-zA-Z0-9]{1,63}(-*[a-zA-Z0-9\+\-\.]){0,63}$`)
	bedrockToken   = regexp.MustCompile(`^[a-zA-Z0-9](-*[a-zA-Z0-9])*$`)
	// bedrockStatuses are the job statuses of the emulator's phases
	// (bedrockStatus refines completed and expired).
	bedrockStatuses = map[string]string{stValidating: "Validating", stInProgress: "InProgress", stFinalizing: "InProgress",
		stCompleted: "Completed", stFailed: "Failed", stExpired: "Expired", stCancelling: "Stopping", stCancelled: "Stopped"}
)

func (s *Server) bedrockRoutes(mux *http.ServeMux) {
	const p = bedrockPrefix
	mux.HandleFunc("POST "+p+"/model-invocation-job", s.bedrockCreate)
	mux.HandleFunc("GET "+p+"/model-invocation-jobs", s.bedrockList)
	mux.HandleFunc("GET "+p+"/model-invocation-job/{id}", s.bedrockGet)
	mux.HandleFunc("POST "+p+"/model-invocation-job/{id}/stop", s.bedrockStop)
	for _, op := range []string{"invoke", "converse"} {
		mux.HandleFunc("POST "+bedrockRuntimePrefix+"/model/{model}/"+op, s.bedrockRuntime(op == "converse"))
	}
}

// bedrockRuntime answers InvokeModel (or Converse) with the model of its
// batch jobs, counted as a direct call under the job its batches count
// under (countSync).
func (s *Server) bedrockRuntime(converse bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := readLimited(r, 32<<20)
		if err != nil {
			bedrockError(w, http.StatusRequestEntityTooLarge, "ValidationException", err.Error())
			return
		}
		if !s.syncAdmit(w, famBedrock) {
			return
		}
		kind := "InvokeModel"
		if converse {
			kind = "Converse"
		}
		m := s.runBedrockModel(&batchRec{Model: r.PathValue("model"), Endpoint: kind}, body)
		s.countSync(famBedrock, syncJobKey(famBedrock, r.Header.Get(HeaderSyncJob)), r, m.status)
		if s.syncWait(r) != nil {
			return
		}
		if m.status != http.StatusOK {
			bedrockFault(w, m.status, gjson.GetBytes(m.body, "message").String())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(m.status)
		w.Write(m.body)
	}
}

// bedrockError writes a rest-json error: the exception's name in
// x-amzn-ErrorType, the message in the body.
func bedrockError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("x-amzn-ErrorType", typ)
	writeJSON(w, status, map[string]any{"message": msg})
}

// bedrockFault is the exception of an HTTP status, for injected faults
// and the family's generic errors.
func bedrockFault(w http.ResponseWriter, status int, msg string) {
	typ := map[int]string{400: "ValidationException", 401: "UnrecognizedClientException", 403: "AccessDeniedException",
		404: "ResourceNotFoundException", 409: "ConflictException", 429: "ThrottlingException"}[status]
	if typ == "" {
		typ = "InternalServerException"
	}
	bedrockError(w, status, typ, msg)
}

// bedrockSecret is the secret access key calls must be signed with, or ""
// when any signature goes.
func (s *Server) bedrockSecret() (accessKey, secret string) {
	if sk := os.Getenv("AWS_SECRET_ACCESS_KEY"); sk != "" {
		return os.Getenv("AWS_ACCESS_KEY_ID"), sk
	}
	return "", s.opts.APIKey
}

// bedrockAuthorized checks a call's SigV4 signature: the request is
// signed again with the secret the emulator knows, by the SDK's own
// signer, and the signatures must agree.
func (s *Server) bedrockAuthorized(w http.ResponseWriter, r *http.Request) bool {
	wantKey, secret := s.bedrockSecret()
	if secret == "" {
		return true
	}
	deny := func(typ, msg string) bool {
		bedrockError(w, http.StatusForbidden, typ, msg)
		return false
	}
	auth := r.Header.Get("Authorization")
	fields := map[string]string{}
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return deny("UnrecognizedClientException", "The security token included in the request is invalid.")
	}
	for _, f := range strings.Split(rest, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(f), "="); ok {
			fields[k] = v
		}
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[3] != "bedrock" {
		return deny("InvalidSignatureException", "Credential should be scoped to a valid service: 'bedrock'.")
	}
	if wantKey != "" && scope[0] != wantKey {
		return deny("UnrecognizedClientException", "The security token included in the request is invalid.")
	}
	when, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return deny("InvalidSignatureException", "X-Amz-Date is missing or malformed.")
	}
	body, err := readLimited(r, 64<<20)
	if err != nil {
		return deny("ValidationException", err.Error())
	}
	r.Body = readCloser{bytes.NewReader(body)}
	sum := sha256.Sum256(body)
	again, _ := http.NewRequestWithContext(r.Context(), r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	again.Host = r.Host
	for _, h := range strings.Split(fields["SignedHeaders"], ";") {
		if h != "host" && h != "content-length" {
			again.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	if !strings.Contains(fields["SignedHeaders"], "content-length") {
		again.ContentLength = 0
	}
	creds := aws.Credentials{AccessKeyID: scope[0], SecretAccessKey: secret, SessionToken: r.Header.Get("X-Amz-Security-Token")}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, hex.EncodeToString(sum[:]), "bedrock", scope[2], when); err != nil {
		return deny("InvalidSignatureException", err.Error())
	}
	if got := again.Header.Get("Authorization"); !strings.HasSuffix(got, "Signature="+fields["Signature"]) {
		return deny("InvalidSignatureException", "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.")
	}
	return true
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// bedrockJobID is the id part of a job identifier: the 12 characters, or
// the last part of an ARN.
func bedrockJobID(ident string) string {
	if strings.HasPrefix(ident, "arn:") {
		return path.Base(ident)
	}
	return ident
}

// bedrockCreateReq is CreateModelInvocationJob's body.
type bedrockCreateReq struct {
	JobName            string `json:"jobName"`
	RoleArn            string `json:"roleArn"`
	ClientRequestToken string `json:"clientRequestToken"`
	ModelID            string `json:"modelId"`
	InputDataConfig    struct {
		S3 *struct {
			URI    string `json:"s3Uri"`
			Format string `json:"s3InputFormat"`
		} `json:"s3InputDataConfig"`
	} `json:"inputDataConfig"`
	OutputDataConfig struct {
		S3 *struct {
			URI string `json:"s3Uri"`
		} `json:"s3OutputDataConfig"`
	} `json:"outputDataConfig"`
	TimeoutHours   *int   `json:"timeoutDurationInHours"`
	InvocationType string `json:"modelInvocationType"`
}

// check is the validation the service answers 400 for.
func (q *bedrockCreateReq) check() string {
	switch {
	case !bedrockJobName.MatchString(q.JobName):
		return "1 validation error detected: Value at 'jobName' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9]{1,63}(-*[a-zA-Z0-9\\+\\-\\.]){0,63}"
	case q.RoleArn == "":
		return "1 validation error detected: Value null at 'roleArn' failed to satisfy constraint: Member must not be null"
	case q.ModelID == "":
		return "1 validation error detected: Value null at 'modelId' failed to satisfy constraint: Member must not be null"
	case q.ClientRequestToken != "" && (len(q.ClientRequestToken) > 256 || !bedrockToken.MatchString(q.ClientRequestToken)):
		return "1 validation error detected: Value at 'clientRequestToken' failed to satisfy constraint"
	case q.InputDataConfig.S3 == nil || !strings.HasPrefix(q.InputDataConfig.S3.URI, "s3://"):
		return "inputDataConfig.s3InputDataConfig.s3Uri must be an s3:// URI"
	case q.OutputDataConfig.S3 == nil || !strings.HasPrefix(q.OutputDataConfig.S3.URI, "s3://"):
		return "outputDataConfig.s3OutputDataConfig.s3Uri must be an s3:// URI"
	case q.InputDataConfig.S3.Format != "" && q.InputDataConfig.S3.Format != "JSONL":
		return "s3InputFormat must be JSONL"
	case q.TimeoutHours != nil && (*q.TimeoutHours < 24 || *q.TimeoutHours > 168):
		return "1 validation error detected: Value at 'timeoutDurationInHours' failed to satisfy constraint: Member must have value between 24 and 168"
	case q.InvocationType != "" && q.InvocationType != "InvokeModel" && q.InvocationType != "Converse":
		return "modelInvocationType must be InvokeModel or Converse"
	}
	return ""
}

// bedrockByToken is the job a clientRequestToken made. Caller holds s.mu.
func (s *Server) bedrockByToken(token string) *batchRec {
	if token == "" {
		return nil
	}
	for _, b := range s.batches {
		if b.Family == famBedrock && b.Metadata["clientRequestToken"] == token {
			return b
		}
	}
	return nil
}

func (s *Server) bedrockCreate(w http.ResponseWriter, r *http.Request) {
	var q bedrockCreateReq
	body, err := readLimited(r, 1<<20)
	if err == nil {
		err = json.Unmarshal(body, &q)
	}
	if err != nil {
		bedrockError(w, http.StatusBadRequest, "ValidationException", "the body is not a CreateModelInvocationJob request: "+err.Error())
		return
	}
	if msg := q.check(); msg != "" {
		bedrockError(w, http.StatusBadRequest, "ValidationException", msg)
		return
	}
	if arn, ok := s.bedrockSeen(q.ClientRequestToken); ok {
		writeJSON(w, http.StatusOK, map[string]any{"jobArn": arn})
		return
	}
	id, seq := s.bedrockNewID()
	if err := s.bedrockFetchInput(r.Context(), q.InputDataConfig.S3.URI, s.batchInput(id)); err != nil {
		bedrockError(w, http.StatusBadRequest, "ValidationException", "cannot read the input: "+err.Error())
		return
	}
	st, _ := os.Stat(s.batchInput(id))
	sc, err := scanFile(s.batchInput(id), st.Size(), s.opts.MaxFileBytes, s.opts.MaxRequestsPerBatch, "too_many_records", scanBedrockLine)
	if err != nil {
		os.Remove(s.batchInput(id))
		bedrockFault(w, http.StatusInternalServerError, err.Error())
		return
	}
	if min := s.opts.BedrockMinRecords; min > 0 && sc.n < min && len(sc.errs) == 0 {
		sc.errs = append(sc.errs, lineErr("ValidationException", fmt.Sprintf(
			"The job has %d records, fewer than the minimum of %d records per batch inference job for this model.", sc.n, min), 0, ""))
	}
	hours := 24
	if q.TimeoutHours != nil {
		hours = *q.TimeoutHours
	}
	if q.InvocationType == "" {
		q.InvocationType = "InvokeModel"
	}
	region := "us-east-1"
	if sc := strings.Split(r.Header.Get("Authorization"), "/"); len(sc) >= 5 {
		region = sc[2]
	}
	now := s.now()
	b := &batchRec{ID: id, Family: famBedrock, Seq: seq, Created: now, Endpoint: q.InvocationType, Model: q.ModelID,
		Metadata: map[string]string{"clientRequestToken": q.ClientRequestToken, "jobName": q.JobName, "roleArn": q.RoleArn,
			"input": q.InputDataConfig.S3.URI, "output": q.OutputDataConfig.S3.URI, "region": region},
		WindowSec: int64(hours) * 3600, JobKey: jobKeyFromFilename(path.Base(q.InputDataConfig.S3.URI)),
		N: sc.n, Tokens: sc.tokens, ScanErrors: sc.errs,
		FailInjected: s.fated("vfail", id, 0, s.opts.ValidationFailRate),
		ExpireFate:   s.fated("expire", id, 0, s.opts.ExpireRate),
		Status:       stValidating}
	if bt := max(s.opts.BatchTime, bedrockMinJobTime); bt != s.opts.BatchTime {
		ns := int64(bt)
		b.BatchTimeNs = &ns
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev := s.bedrockByToken(q.ClientRequestToken); prev != nil {
		// The same token won a race: the first job stands, this one never was.
		os.Remove(s.batchInput(id))
		writeJSON(w, http.StatusOK, map[string]any{"jobArn": s.bedrockARN(prev)})
		return
	}
	s.tick(now)
	s.addBatch(b)
	answer := map[string]any{"jobArn": s.bedrockARN(b)}
	if s.forgets(b) {
		s.forget(b)
	}
	writeJSON(w, http.StatusOK, answer)
}

// bedrockSeen is the ARN of the job token made, if any: a repeated create
// is ignored and answered with the first job (the SDK's documented
// idempotency).
func (s *Server) bedrockSeen(token string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.bedrockByToken(token); b != nil {
		return s.bedrockARN(b), true
	}
	return "", false
}

func (s *Server) bedrockNewID() (string, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := s.nextSeq()
	return hexID(s.opts.Seed, "bjob", "", int(seq), 6), seq
}

func (s *Server) bedrockARN(b *batchRec) string {
	return "arn:aws:bedrock:" + b.Metadata["region"] + ":" + bedrockAccount + ":model-invocation-job/" + b.ID
}

// bedrockS3 opens the bucket of an s3:// URI on the S3 server of the
// emulator's AWS environment, and returns the key the URI names.
func bedrockS3(ctx context.Context, uri string) (*objstore.S3, string, error) {
	loc, err := objstore.Parse(uri)
	if err != nil {
		return nil, "", err
	}
	st, err := objstore.NewS3(ctx, loc.Bucket, "", objstore.S3Options{Endpoint: objstore.EndpointFromEnv(os.Getenv)})
	return st, loc.Key, err
}

// bedrockFetchInput copies the job's input to dst: the object uri names,
// or every .jsonl object under it when it names a folder.
func (s *Server) bedrockFetchInput(ctx context.Context, uri, dst string) error {
	st, key, err := bedrockS3(ctx, uri)
	if err != nil {
		return err
	}
	if !strings.HasSuffix(key, "/") && key != "" {
		return objstore.Fetch(ctx, st, key, dst)
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	err = st.List(ctx, key, func(info objstore.Info) error {
		if !strings.HasSuffix(info.Key, ".jsonl") {
			return nil
		}
		rc, _, err := st.Open(ctx, info.Key)
		if err != nil {
			return err
		}
		defer rc.Close()
		var b bytes.Buffer
		if _, err := b.ReadFrom(rc); err != nil {
			return err
		}
		if b.Len() > 0 && !bytes.HasSuffix(b.Bytes(), []byte("\n")) {
			b.WriteByte('\n')
		}
		_, err = out.Write(b.Bytes())
		return err
	})
	if err != nil {
		return err
	}
	return out.Close()
}

// scanBedrockLine checks one input record: {"recordId", "modelInput"},
// modelInput an object; a recordId, when given, once per job.
func scanBedrockLine(t []byte, lineNo int, seen map[string]struct{}, sc *scanResult, add func(batchError)) {
	l := gjson.ParseBytes(t)
	id := l.Get("recordId")
	switch {
	case !gjson.ValidBytes(t) || !l.IsObject():
		add(lineErr("invalid_json_line", fmt.Sprintf("Line %d is not a JSON object.", lineNo), lineNo, ""))
	case !l.Get("modelInput").IsObject():
		add(lineErr("invalid_request", fmt.Sprintf("Line %d: modelInput must be a JSON object.", lineNo), lineNo, "modelInput"))
	case id.Exists() && id.Type != gjson.String:
		add(lineErr("invalid_request", fmt.Sprintf("Line %d: recordId must be a string.", lineNo), lineNo, "recordId"))
	default:
		if id.Str != "" {
			if _, dup := seen[id.Str]; dup {
				add(lineErr("duplicate_record_id", fmt.Sprintf("Line %d: recordId %q is used more than once.", lineNo, id.Str), lineNo, "recordId"))
				return
			}
			seen[id.Str] = struct{}{}
		}
		sc.tokens += approxTokens(len(l.Get("modelInput").Raw))
	}
}

// bedrockStatus is the job's status: a job that ran out of time after it
// started, or whose records did not all succeed, is PartiallyCompleted.
func bedrockStatus(b *batchRec) string {
	switch {
	case b.Status == stExpired && b.InProgressAt != nil:
		return "PartiallyCompleted"
	case b.Status == stCompleted && b.Counts.Errored > 0:
		return "PartiallyCompleted"
	}
	return bedrockStatuses[b.Status]
}

// bedrockJob renders a job (GetModelInvocationJob; the listing's summary
// has the same members) as of now.
func (s *Server) bedrockJob(b *batchRec, now time.Time) map[string]any {
	ts := func(t *time.Time) any {
		if t == nil {
			return nil
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	m := map[string]any{
		"jobArn": s.bedrockARN(b), "jobName": b.Metadata["jobName"], "modelId": b.Model, "roleArn": b.Metadata["roleArn"],
		"status": bedrockStatus(b), "submitTime": ts(&b.Created), "lastModifiedTime": ts(&now),
		"inputDataConfig":        map[string]any{"s3InputDataConfig": map[string]any{"s3Uri": b.Metadata["input"], "s3InputFormat": "JSONL"}},
		"outputDataConfig":       map[string]any{"s3OutputDataConfig": map[string]any{"s3Uri": b.Metadata["output"]}},
		"timeoutDurationInHours": b.WindowSec / 3600, "modelInvocationType": b.Endpoint,
		"jobExpirationTime": ts(aws.Time(b.Created.Add(b.window()))),
	}
	if tok := b.Metadata["clientRequestToken"]; tok != "" {
		m["clientRequestToken"] = tok
	}
	if e := b.endedAt(); e != nil {
		m["endTime"] = ts(e)
	}
	if len(b.Errors) > 0 {
		m["message"] = b.Errors[0].Message
	}
	switch b.Status {
	case stInProgress, stFinalizing, stCancelling:
		ok, failed := s.liveCounts(b, now)
		m["totalRecordCount"], m["processedRecordCount"], m["successRecordCount"], m["errorRecordCount"] = b.N, ok+failed, ok, failed
	case stCompleted, stExpired, stCancelled:
		c := b.Counts
		m["totalRecordCount"], m["processedRecordCount"], m["successRecordCount"], m["errorRecordCount"] = b.N, c.Succeeded+c.Errored, c.Succeeded, c.Errored
	}
	return m
}

// bedrockLookup finds the job of a path's identifier (its id or ARN),
// ticked and, once ended, with its output written to S3. It writes the
// 404 itself. Caller holds s.mu.
func (s *Server) bedrockLookup(w http.ResponseWriter, r *http.Request, now time.Time) *batchRec {
	s.tick(now)
	id := bedrockJobID(r.PathValue("id"))
	b := s.batches[id]
	if b == nil || b.Family != famBedrock {
		bedrockError(w, http.StatusNotFound, "ResourceNotFoundException", "The specified job "+r.PathValue("id")+" was not found.")
		return nil
	}
	s.bedrockPublish(r.Context(), b)
	return b
}

func (s *Server) bedrockGet(w http.ResponseWriter, r *http.Request) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.bedrockLookup(w, r, now); b != nil {
		writeJSON(w, http.StatusOK, s.bedrockJob(b, now))
	}
}

func (s *Server) bedrockStop(w http.ResponseWriter, r *http.Request) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.bedrockLookup(w, r, now)
	if b == nil {
		return
	}
	if !s.cancel(b, now) {
		bedrockError(w, http.StatusBadRequest, "ConflictException", fmt.Sprintf("The job %s is %s and cannot be stopped.", b.ID, bedrockStatus(b)))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{})
}

func (s *Server) bedrockList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var after, before time.Time
	for _, p := range []struct {
		key string
		t   *time.Time
	}{{"submitTimeAfter", &after}, {"submitTimeBefore", &before}} {
		if v := q.Get(p.key); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				bedrockError(w, http.StatusBadRequest, "ValidationException", p.key+" must be an ISO-8601 time")
				return
			}
			*p.t = t
		}
	}
	size, start := 1000, 0
	if v := q.Get("maxResults"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			bedrockError(w, http.StatusBadRequest, "ValidationException", "maxResults must be between 1 and 1000")
			return
		}
		size = n
	}
	if v := q.Get("nextToken"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			bedrockError(w, http.StatusBadRequest, "ValidationException", "nextToken is not valid")
			return
		}
		start = n
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick(now)
	var all []*batchRec
	for _, b := range s.sortedBatches(famBedrock) { // newest first
		if (after.IsZero() || b.Created.After(after)) && (before.IsZero() || b.Created.Before(before)) &&
			strings.Contains(b.Metadata["jobName"], q.Get("nameContains")) &&
			(q.Get("statusEquals") == "" || bedrockStatus(b) == q.Get("statusEquals")) {
			all = append(all, b)
		}
	}
	if q.Get("sortOrder") == "Ascending" {
		for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
			all[i], all[j] = all[j], all[i]
		}
	}
	page := all[min(start, len(all)):min(start+size, len(all))]
	sums := []any{}
	for _, b := range page {
		s.bedrockPublish(r.Context(), b)
		sums = append(sums, s.bedrockJob(b, now))
	}
	out := map[string]any{"invocationJobSummaries": sums}
	if start+size < len(all) {
		out["nextToken"] = strconv.Itoa(start + size)
	}
	writeJSON(w, http.StatusOK, out)
}

// bedrockPublish writes an ended job's output to S3, once: the records
// file, OUTPUT_URI/<job id>/<input name>.out, and manifest.json.out with
// the counts. A failure is logged and tried again at the next call.
// Caller holds s.mu.
func (s *Server) bedrockPublish(ctx context.Context, b *batchRec) {
	if !terminal(b.Status) || b.Metadata["published"] != "" {
		return
	}
	if b.Status == stFailed || (b.Status == stCancelled && b.InProgressAt == nil) {
		b.Metadata["published"] = "none"
		s.saveBatch(b)
		return
	}
	st, key, err := bedrockS3(ctx, b.Metadata["output"])
	if err == nil {
		dir := objstore.Join(key, b.ID)
		name := path.Base(b.Metadata["input"])
		if strings.HasSuffix(b.Metadata["input"], "/") {
			name = "records.jsonl"
		}
		err = st.PutFile(ctx, objstore.Join(dir, name+".out"), s.batchResults(b.ID))
		if errors.Is(err, os.ErrNotExist) {
			err = st.Put(ctx, objstore.Join(dir, name+".out"), bytes.NewReader(nil))
		}
		if err == nil {
			c := b.Counts
			manifest := mustJSON(map[string]any{"totalRecordCount": b.N, "processedRecordCount": c.Succeeded + c.Errored,
				"successRecordCount": c.Succeeded, "errorRecordCount": c.Errored,
				"inputTokenCount": b.InputTokens, "outputTokenCount": b.OutputTokens})
			err = st.Put(ctx, objstore.Join(dir, "manifest.json.out"), bytes.NewReader(manifest))
		}
	}
	if err != nil {
		s.logf("emulator: bedrock job %s: writing its output to %s: %v", b.ID, b.Metadata["output"], err)
		return
	}
	b.Metadata["published"] = "true"
	s.saveBatch(b)
}

// runBedrockLine runs one record. Records not run (the job stopped or out
// of time) are in no output file, as the service leaves them out.
func (s *Server) runBedrockLine(b *batchRec, i int, line []byte) lineResult {
	l := gjson.ParseBytes(line)
	id := l.Get("recordId").Str
	if id == "" {
		id = hexID(s.opts.Seed, "brec", b.ID, i, 11) // "Amazon Bedrock adds it in the output"
	}
	in := l.Get("modelInput")
	r := lineResult{customID: id}
	rec := func(key string, v []byte) []byte {
		d := append([]byte(`{"recordId":`), mustJSON(id)...)
		d = append(d, `,"modelInput":`...)
		d = append(d, in.Raw...)
		d = append(d, `,"`+key+`":`...)
		d = append(d, v...)
		return append(d, '}')
	}
	fail := func(code int, msg string) lineResult {
		// A record that failed produced nothing to pay for: it is not
		// counted as executed, so sending it again is no second purchase.
		r.dest, r.kind, r.customID = destOut, outErrored, ""
		r.data = rec("error", mustJSON(map[string]any{"errorCode": code, "errorMessage": msg}))
		return r
	}
	f := s.lineFate(b, i)
	if e, ok := injectedErr(&bedrockLineErrs, f); ok {
		return fail(e.status, e.msg)
	}
	m := s.runBedrockModel(b, []byte(in.Raw))
	r.in, r.out = m.in, m.out
	if f == fateOmit {
		r.kind = outOmitted
		return r
	}
	if m.status != http.StatusOK {
		return fail(m.status, gjson.GetBytes(m.body, "message").String())
	}
	r.dest, r.kind, r.data = destOut, outSucceeded, rec("modelOutput", m.body)
	return r
}

// bedrockLineErrs are the record errors the emulator injects into
// Bedrock's output (see injectedErr).
var bedrockLineErrs = [3]injected{
	{status: 429, msg: "Too many requests (injected by the emulator's LineErrorRate)."},
	{status: 500, msg: "Internal server error (injected by the emulator's LineErrorRate)."},
	{status: 400, msg: "Malformed input request (permanent error injected by the emulator's LineErrorRate)."},
}

// runBedrockModel answers a modelInput as the job's model would: a
// Converse request when the job is of type Converse, else the model's
// InvokeModel body (Claude, Llama, Nova, Titan embeddings).
func (s *Server) runBedrockModel(b *batchRec, in []byte) modelOut {
	bad := func(msg string) modelOut {
		return modelOut{status: 400, body: mustJSON(map[string]any{"message": msg})}
	}
	model := b.Model
	switch {
	case b.Endpoint == "Converse" || strings.Contains(model, "amazon.nova"):
		var q struct {
			Messages []message `json:"messages"`
			System   []struct {
				Text string `json:"text"`
			} `json:"system"`
			Config struct {
				MaxTokens int64 `json:"maxTokens"`
			} `json:"inferenceConfig"`
		}
		if json.Unmarshal(in, &q) != nil || len(q.Messages) == 0 {
			return bad("Malformed input request: messages is required.")
		}
		var sys strings.Builder
		for _, t := range q.System {
			sys.WriteString(t.Text)
		}
		all, last := promptOf(q.Messages, sys.String())
		text, cut := answer(last, q.Config.MaxTokens)
		stop := "end_turn"
		if cut {
			stop = "max_tokens"
		}
		i, o := approxTokens(len(all)), approxTokens(len(text))
		return modelOut{status: 200, in: i, out: o, body: mustJSON(map[string]any{
			"output":     map[string]any{"message": map[string]any{"role": "assistant", "content": []any{map[string]any{"text": text}}}},
			"stopReason": stop, "usage": map[string]any{"inputTokens": i, "outputTokens": o, "totalTokens": i + o},
			"metrics": map[string]any{"latencyMs": 1}})}
	case strings.Contains(model, "anthropic.claude"):
		if v := gjson.GetBytes(in, "anthropic_version"); v.Str != "bedrock-2023-05-31" {
			return bad("Malformed input request: anthropic_version must be bedrock-2023-05-31.")
		}
		if gjson.GetBytes(in, "model").Exists() {
			return bad("Malformed input request: extraneous key [model] is not permitted.")
		}
		params, _ := sjson.SetBytes(bytes.Clone(in), "model", model)
		return s.runAnthropic(params, "batch")
	case strings.Contains(model, "meta.llama"):
		p := gjson.GetBytes(in, "prompt")
		if p.Type != gjson.String {
			return bad("Malformed input request: prompt is required.")
		}
		text, cut := answer(llamaUserTurn(p.Str), gjson.GetBytes(in, "max_gen_len").Int())
		stop := "stop"
		if cut {
			stop = "length"
		}
		i, o := approxTokens(len(p.Str)), approxTokens(len(text))
		return modelOut{status: 200, in: i, out: o, body: mustJSON(map[string]any{"generation": text,
			"prompt_token_count": i, "generation_token_count": o, "stop_reason": stop})}
	case strings.Contains(model, "amazon.titan-embed"):
		t := gjson.GetBytes(in, "inputText")
		if t.Type != gjson.String {
			return bad("Malformed input request: inputText is required.")
		}
		dim := int(gjson.GetBytes(in, "dimensions").Int())
		if dim <= 0 {
			dim = 1024
		}
		i := approxTokens(len(t.Str))
		return modelOut{status: 200, in: i, body: mustJSON(map[string]any{"embedding": embed(model, t.Str, dim), "inputTextTokenCount": i})}
	}
	return bad("The emulator has no InvokeModel body for model " + model + "; use modelInvocationType Converse.")
}

// llamaUserTurn is the last user turn of a prompt in Llama 3's chat
// template (what the fake model answers, as it answers a chat's last user
// message), or the whole prompt when it has none: answering the
// template's fixed head would give every request the same answer.
func llamaUserTurn(prompt string) string {
	const head = "<|start_header_id|>user<|end_header_id|>\n\n"
	i := strings.LastIndex(prompt, head)
	if i < 0 {
		return prompt
	}
	turn := prompt[i+len(head):]
	if j := strings.Index(turn, "<|eot_id|>"); j >= 0 {
		turn = turn[:j]
	}
	return turn
}
