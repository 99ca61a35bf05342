package emulator

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrock"
	"github.com/aws/aws-sdk-go-v2/service/bedrock/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice/internal/emutest"
	"github.com/sluice-batch/sluice/internal/testsrv"
)

// bedrockSDK is the official SDK's Bedrock client of the emulator at base,
// with the credentials of the environment (the test S3 server's), or with
// secret instead when given.
func bedrockSDK(t *testing.T, base, secret string) *bedrock.Client {
	t.Helper()
	opts := []func(*config.LoadOptions) error{config.WithRegion("us-east-1")}
	cfg, err := config.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		cfg.Credentials = credentials.NewStaticCredentialsProvider(testsrvKeyID(), secret, "")
	}
	return bedrock.NewFromConfig(cfg, func(o *bedrock.Options) { o.BaseEndpoint = aws.String(base) })
}

func testsrvKeyID() string {
	for _, kv := range testsrv.S3Env() {
		if v, ok := strings.CutPrefix(kv, "AWS_ACCESS_KEY_ID="); ok {
			return v
		}
	}
	return ""
}

// TestBedrockSDKRoundTrip drives the emulator's Bedrock family with the
// official aws-sdk-go-v2/service/bedrock against a real S3 server
// (versitygw): input put in S3, CreateModelInvocationJob (SigV4-signed),
// the same clientRequestToken answered with the same job, the job seen
// unfinished first, then Completed with its *.jsonl.out and
// manifest.json.out in S3 under OUTPUT/<job id>/, one record per
// recordId (Claude, Converse); a job under the minimum of records Failed
// with the numbers; StopModelInvocationJob of a second job, a
// stop of an ended job (ConflictException), the paginated listing, a
// missing job (ResourceNotFoundException) and a wrong secret
// (InvalidSignatureException).
func TestBedrockSDKRoundTrip(t *testing.T) {
	t.Parallel()
	ep, bucket := testsrv.S3(t)
	// The emulator's clock stands still until the jobs are all made, then
	// moves past their 400 ms: new jobs are seen new however loaded the
	// machine, and their run is not waited out on the wall clock.
	clk := emutest.NewClock()
	_, ts := start(t, Options{BatchTime: 400 * time.Millisecond, BedrockMinRecords: 5, Now: clk.Now})
	ctx := context.Background()
	s3c, err := testsrv.S3Client(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	e := &bedrockWorld{t: t, ctx: ctx, c: bedrockSDK(t, ts.URL+"/bedrock", ""), s3: s3c, bucket: bucket}
	var claude, converse bytes.Buffer
	for i := 0; i < 5; i++ {
		fmt.Fprintf(&claude, `{"recordId":"CALL%07d","modelInput":{"anthropic_version":"bedrock-2023-05-31","max_tokens":50,"messages":[{"role":"user","content":"question %d"}]}}`+"\n", i, i)
		fmt.Fprintf(&converse, `{"recordId":"conv-%d","modelInput":{"messages":[{"role":"user","content":[{"text":"hello %d"}]}],"inferenceConfig":{"maxTokens":20}}}`+"\n", i, i)
	}
	e.put("in/claude.jsonl", claude.Bytes())
	e.put("in/converse.jsonl", converse.Bytes())
	e.put("in/few.jsonl", bytes.Join(bytes.SplitAfter(claude.Bytes(), []byte("\n"))[:2], nil))

	const haiku = "anthropic.claude-3-haiku-20240307-v1:0"
	arn := e.create("job-claude", "tok-1", haiku, "in/claude.jsonl", "InvokeModel")
	if again := e.create("job-claude", "tok-1", haiku, "in/claude.jsonl", "InvokeModel"); again != arn {
		t.Fatalf("the same clientRequestToken again: %q; want the first job %q", again, arn)
	}
	j := e.get(arn)
	if j.Status == types.ModelInvocationJobStatusCompleted || aws.ToString(j.ClientRequestToken) != "tok-1" ||
		aws.ToString(j.ModelId) != haiku || j.SubmitTime == nil {
		t.Fatalf("a new job: %+v", j)
	}
	stopArn := e.create("job-converse", "tok-2", "mistral.mistral-large-2402-v1:0", "in/converse.jsonl", "Converse")
	if _, err := e.c.StopModelInvocationJob(ctx, &bedrock.StopModelInvocationJobInput{JobIdentifier: aws.String(stopArn)}); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if st := e.get(stopArn).Status; st != types.ModelInvocationJobStatusStopping && st != types.ModelInvocationJobStatusStopped {
		t.Fatalf("stopped job: %s", st)
	}
	convArn := e.create("job-converse-2", "tok-3", "mistral.mistral-large-2402-v1:0", "in/converse.jsonl", "Converse")
	fewArn := e.create("job-few", "tok-4", haiku, "in/few.jsonl", "InvokeModel")
	clk.Advance(time.Second)
	e.waitCompleted(arn, convArn)
	if j := e.get(fewArn); j.Status != types.ModelInvocationJobStatusFailed || !strings.Contains(aws.ToString(j.Message), "fewer than the minimum of 5") {
		t.Fatalf("a job under the minimum of records: %s %q, want Failed", j.Status, aws.ToString(j.Message))
	}
	if j := e.get(arn); aws.ToInt64(j.TotalRecordCount) != 5 || aws.ToInt64(j.SuccessRecordCount) != 5 || j.EndTime == nil {
		t.Fatalf("completed job: %+v", j)
	}
	e.checkOutput(arn, "claude.jsonl", "CALL", "content.0.text")
	e.checkOutput(convArn, "converse.jsonl", "conv-", "output.message.content.0.text")
	e.checkErrors(arn, ts.URL+"/bedrock")
}

// bedrockWorld is the SDK's client of the emulator and S3's of the
// bucket the jobs read and write.
type bedrockWorld struct {
	t      *testing.T
	ctx    context.Context
	c      *bedrock.Client
	s3     *s3.Client
	bucket string
}

func (e *bedrockWorld) put(key string, data []byte) {
	e.t.Helper()
	if _, err := e.s3.PutObject(e.ctx, &s3.PutObjectInput{Bucket: &e.bucket, Key: &key, Body: bytes.NewReader(data)}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *bedrockWorld) read(key string) []byte {
	e.t.Helper()
	out, err := e.s3.GetObject(e.ctx, &s3.GetObjectInput{Bucket: &e.bucket, Key: aws.String(key)})
	if err != nil {
		e.t.Fatalf("read s3://%s/%s: %v", e.bucket, key, err)
	}
	defer out.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(out.Body)
	return b.Bytes()
}

func (e *bedrockWorld) create(name, token, model, input, kind string) string {
	e.t.Helper()
	out, err := e.c.CreateModelInvocationJob(e.ctx, &bedrock.CreateModelInvocationJobInput{
		JobName: aws.String(name), ClientRequestToken: aws.String(token), ModelId: aws.String(model),
		RoleArn:             aws.String("arn:aws:iam::123456789012:role/BedrockBatch"),
		ModelInvocationType: types.ModelInvocationType(kind),
		InputDataConfig: &types.ModelInvocationJobInputDataConfigMemberS3InputDataConfig{Value: types.ModelInvocationJobS3InputDataConfig{
			S3Uri: aws.String("s3://" + e.bucket + "/" + input), S3InputFormat: types.S3InputFormatJsonl}},
		OutputDataConfig: &types.ModelInvocationJobOutputDataConfigMemberS3OutputDataConfig{Value: types.ModelInvocationJobS3OutputDataConfig{
			S3Uri: aws.String("s3://" + e.bucket + "/out/")}},
	})
	if err != nil {
		e.t.Fatalf("create %s: %v", name, err)
	}
	return aws.ToString(out.JobArn)
}

func (e *bedrockWorld) get(id string) *bedrock.GetModelInvocationJobOutput {
	e.t.Helper()
	j, err := e.c.GetModelInvocationJob(e.ctx, &bedrock.GetModelInvocationJobInput{JobIdentifier: aws.String(id)})
	if err != nil {
		e.t.Fatalf("get %s: %v", id, err)
	}
	return j
}

func (e *bedrockWorld) waitCompleted(arns ...string) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, arn := range arns {
		for e.get(arn).Status != types.ModelInvocationJobStatusCompleted {
			if time.Now().After(deadline) {
				e.t.Fatalf("job %s did not complete: %s", arn, e.get(arn).Status)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// checkOutput reads a completed job's records and manifest from S3: five
// records, each recordId once, each with its modelInput and an answer
// with text at the path text.
func (e *bedrockWorld) checkOutput(arn, input, prefix, text string) {
	e.t.Helper()
	id := arn[strings.LastIndexByte(arn, '/')+1:]
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(e.read("out/" + id + "/" + input + ".out")))
	for sc.Scan() {
		l := gjson.ParseBytes(sc.Bytes())
		rid := l.Get("recordId").String()
		if !strings.HasPrefix(rid, prefix) || seen[rid] || !l.Get("modelInput").IsObject() || l.Get("modelOutput."+text).String() == "" {
			e.t.Fatalf("output record: %s", sc.Text())
		}
		seen[rid] = true
	}
	if len(seen) != 5 {
		e.t.Fatalf("%s: %d records, want 5", input, len(seen))
	}
	if m := gjson.ParseBytes(e.read("out/" + id + "/manifest.json.out")); m.Get("totalRecordCount").Int() != 5 || m.Get("successRecordCount").Int() != 5 {
		e.t.Fatalf("manifest: %s", m.Raw)
	}
}

// checkErrors: a stop of an ended job, the paginated listing, a missing
// job and a wrong secret, as the SDK reads them.
func (e *bedrockWorld) checkErrors(arn, base string) {
	e.t.Helper()
	var apiErr smithy.APIError
	_, err := e.c.StopModelInvocationJob(e.ctx, &bedrock.StopModelInvocationJobInput{JobIdentifier: aws.String(arn)})
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "ConflictException" {
		e.t.Fatalf("stop an ended job: %v, want ConflictException", err)
	}
	var names []string
	p := bedrock.NewListModelInvocationJobsPaginator(e.c, &bedrock.ListModelInvocationJobsInput{MaxResults: aws.Int32(2), NameContains: aws.String("job-")})
	for p.HasMorePages() {
		page, err := p.NextPage(e.ctx)
		if err != nil {
			e.t.Fatalf("list: %v", err)
		}
		for _, s := range page.InvocationJobSummaries {
			names = append(names, aws.ToString(s.JobName))
		}
	}
	if strings.Join(names, ",") != "job-few,job-converse-2,job-converse,job-claude" {
		e.t.Fatalf("listing: %v", names)
	}
	_, err = e.c.GetModelInvocationJob(e.ctx, &bedrock.GetModelInvocationJobInput{JobIdentifier: aws.String("abcdefabcdef")})
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) {
		e.t.Fatalf("a missing job: %v, want ResourceNotFoundException", err)
	}
	_, err = bedrockSDK(e.t, base, "not-the-secret").GetModelInvocationJob(e.ctx, &bedrock.GetModelInvocationJobInput{JobIdentifier: aws.String(arn)})
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "InvalidSignatureException" {
		e.t.Fatalf("a wrong secret: %v, want InvalidSignatureException", err)
	}
}
