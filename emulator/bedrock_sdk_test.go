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
	ep, bucket := testsrv.S3(t)
	_ = ep
	_, ts := start(t, Options{BatchTime: 400 * time.Millisecond, BedrockMinRecords: 5})
	ctx := context.Background()
	c := bedrockSDK(t, ts.URL+"/bedrock", "")
	s3c, err := testsrv.S3Client(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string, data []byte) {
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(data)}); err != nil {
			t.Fatal(err)
		}
	}
	var claude, converse bytes.Buffer
	for i := 0; i < 5; i++ {
		fmt.Fprintf(&claude, `{"recordId":"CALL%07d","modelInput":{"anthropic_version":"bedrock-2023-05-31","max_tokens":50,"messages":[{"role":"user","content":"question %d"}]}}`+"\n", i, i)
		fmt.Fprintf(&converse, `{"recordId":"conv-%d","modelInput":{"messages":[{"role":"user","content":[{"text":"hello %d"}]}],"inferenceConfig":{"maxTokens":20}}}`+"\n", i, i)
	}
	put("in/claude.jsonl", claude.Bytes())
	put("in/converse.jsonl", converse.Bytes())
	put("in/few.jsonl", bytes.Join(bytes.SplitAfter(claude.Bytes(), []byte("\n"))[:2], nil))

	create := func(name, token, model, input, kind string) (string, error) {
		out, err := c.CreateModelInvocationJob(ctx, &bedrock.CreateModelInvocationJobInput{
			JobName: aws.String(name), ClientRequestToken: aws.String(token), ModelId: aws.String(model),
			RoleArn:             aws.String("arn:aws:iam::123456789012:role/BedrockBatch"),
			ModelInvocationType: types.ModelInvocationType(kind),
			InputDataConfig: &types.ModelInvocationJobInputDataConfigMemberS3InputDataConfig{Value: types.ModelInvocationJobS3InputDataConfig{
				S3Uri: aws.String("s3://" + bucket + "/" + input), S3InputFormat: types.S3InputFormatJsonl}},
			OutputDataConfig: &types.ModelInvocationJobOutputDataConfigMemberS3OutputDataConfig{Value: types.ModelInvocationJobS3OutputDataConfig{
				S3Uri: aws.String("s3://" + bucket + "/out/")}},
		})
		if err != nil {
			return "", err
		}
		return aws.ToString(out.JobArn), nil
	}
	arn, err := create("job-claude", "tok-1", "anthropic.claude-3-haiku-20240307-v1:0", "in/claude.jsonl", "InvokeModel")
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if again, err := create("job-claude", "tok-1", "anthropic.claude-3-haiku-20240307-v1:0", "in/claude.jsonl", "InvokeModel"); err != nil || again != arn {
		t.Fatalf("the same clientRequestToken again: %q, %v; want the first job %q", again, err, arn)
	}
	get := func(id string) *bedrock.GetModelInvocationJobOutput {
		t.Helper()
		j, err := c.GetModelInvocationJob(ctx, &bedrock.GetModelInvocationJobInput{JobIdentifier: aws.String(id)})
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		return j
	}
	j := get(arn)
	if j.Status == types.ModelInvocationJobStatusCompleted || aws.ToString(j.ClientRequestToken) != "tok-1" ||
		aws.ToString(j.ModelId) != "anthropic.claude-3-haiku-20240307-v1:0" || j.SubmitTime == nil {
		t.Fatalf("a new job: %+v", j)
	}
	stopArn, err := create("job-converse", "tok-2", "mistral.mistral-large-2402-v1:0", "in/converse.jsonl", "Converse")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StopModelInvocationJob(ctx, &bedrock.StopModelInvocationJobInput{JobIdentifier: aws.String(stopArn)}); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if st := get(stopArn).Status; st != types.ModelInvocationJobStatusStopping && st != types.ModelInvocationJobStatusStopped {
		t.Fatalf("stopped job: %s", st)
	}
	convArn, err := create("job-converse-2", "tok-3", "mistral.mistral-large-2402-v1:0", "in/converse.jsonl", "Converse")
	if err != nil {
		t.Fatal(err)
	}
	fewArn, err := create("job-few", "tok-4", "anthropic.claude-3-haiku-20240307-v1:0", "in/few.jsonl", "InvokeModel")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for get(arn).Status != types.ModelInvocationJobStatusCompleted || get(convArn).Status != types.ModelInvocationJobStatusCompleted {
		if time.Now().After(deadline) {
			t.Fatalf("jobs did not complete: %s, %s", get(arn).Status, get(convArn).Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if j := get(fewArn); j.Status != types.ModelInvocationJobStatusFailed || !strings.Contains(aws.ToString(j.Message), "fewer than the minimum of 5") {
		t.Fatalf("a job under the minimum of records: %s %q, want Failed", j.Status, aws.ToString(j.Message))
	}
	j = get(arn)
	if aws.ToInt64(j.TotalRecordCount) != 5 || aws.ToInt64(j.SuccessRecordCount) != 5 || j.EndTime == nil {
		t.Fatalf("completed job: %+v", j)
	}
	read := func(key string) []byte {
		t.Helper()
		out, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: aws.String(key)})
		if err != nil {
			t.Fatalf("read s3://%s/%s: %v", bucket, key, err)
		}
		defer out.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(out.Body)
		return b.Bytes()
	}
	for _, tc := range []struct{ arn, input, prefix, text string }{
		{arn, "claude.jsonl", "CALL", "content.0.text"}, {convArn, "converse.jsonl", "conv-", "output.message.content.0.text"},
	} {
		id := tc.arn[strings.LastIndexByte(tc.arn, '/')+1:]
		seen := map[string]bool{}
		sc := bufio.NewScanner(bytes.NewReader(read("out/" + id + "/" + tc.input + ".out")))
		for sc.Scan() {
			l := gjson.ParseBytes(sc.Bytes())
			rid := l.Get("recordId").String()
			if !strings.HasPrefix(rid, tc.prefix) || seen[rid] || !l.Get("modelInput").IsObject() || l.Get("modelOutput."+tc.text).String() == "" {
				t.Fatalf("output record: %s", sc.Text())
			}
			seen[rid] = true
		}
		if len(seen) != 5 {
			t.Fatalf("%s: %d records, want 5", tc.input, len(seen))
		}
		if m := gjson.ParseBytes(read("out/" + id + "/manifest.json.out")); m.Get("totalRecordCount").Int() != 5 || m.Get("successRecordCount").Int() != 5 {
			t.Fatalf("manifest: %s", m.Raw)
		}
	}
	var apiErr smithy.APIError
	_, err = c.StopModelInvocationJob(ctx, &bedrock.StopModelInvocationJobInput{JobIdentifier: aws.String(arn)})
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "ConflictException" {
		t.Fatalf("stop an ended job: %v, want ConflictException", err)
	}
	var names []string
	p := bedrock.NewListModelInvocationJobsPaginator(c, &bedrock.ListModelInvocationJobsInput{MaxResults: aws.Int32(2), NameContains: aws.String("job-")})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		for _, s := range page.InvocationJobSummaries {
			names = append(names, aws.ToString(s.JobName))
		}
	}
	if strings.Join(names, ",") != "job-few,job-converse-2,job-converse,job-claude" {
		t.Fatalf("listing: %v", names)
	}
	_, err = c.GetModelInvocationJob(ctx, &bedrock.GetModelInvocationJobInput{JobIdentifier: aws.String("abcdefabcdef")})
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) {
		t.Fatalf("a missing job: %v, want ResourceNotFoundException", err)
	}
	_, err = bedrockSDK(t, ts.URL+"/bedrock", "not-the-secret").GetModelInvocationJob(ctx, &bedrock.GetModelInvocationJobInput{JobIdentifier: aws.String(arn)})
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "InvalidSignatureException" {
		t.Fatalf("a wrong secret: %v, want InvalidSignatureException", err)
	}
}
