package testsrv

// The S3-compatible server the tests use: $SLUICE_TEST_S3 when set (an
// endpoint URL; credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY),
// else one private versitygw (posix backend, loopback, a temp directory)
// started by the first test of the process that needs it and killed when
// that process exits. Tests never skip for want of it: they fail, saying
// how to install it.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// VersitygwVersion is the versitygw the tests install and run.
const VersitygwVersion = "v1.8.0"

const installHint = "install it with: go install github.com/versity/versitygw/cmd/versitygw@" + VersitygwVersion +
	" (or point SLUICE_TEST_S3 at an S3-compatible endpoint, with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"

var s3srv = shared{start: startS3} // address: the endpoint URL

// S3 returns the endpoint of the test S3 server and a fresh, empty bucket
// on it. The process environment then holds what the AWS SDK needs to
// reach it (AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_REGION); S3Env is the same for a subprocess.
func S3(t testing.TB) (endpoint, bucket string) {
	t.Helper()
	return must(t, "test S3 server", NewS3Bucket)
}

// NewS3Bucket is S3 for callers that are not tests
// (scripts/bench-scale.sh through internal/benche2e).
func NewS3Bucket() (endpoint, bucket string, err error) {
	return s3srv.newBucket(func(ctx context.Context, endpoint, bucket string) error {
		client, err := S3Client(ctx, endpoint)
		if err != nil {
			return err
		}
		_, err = client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket})
		return err
	})
}

// S3Env is the environment a subprocess needs to reach the test S3
// server (call S3 first).
func S3Env() []string {
	return []string{"AWS_ENDPOINT_URL_S3=" + s3srv.addr, "AWS_ACCESS_KEY_ID=" + os.Getenv("AWS_ACCESS_KEY_ID"),
		"AWS_SECRET_ACCESS_KEY=" + os.Getenv("AWS_SECRET_ACCESS_KEY"), "AWS_REGION=" + region()}
}

func region() string {
	if r := os.Getenv("AWS_REGION"); r != "" {
		return r
	}
	return "us-east-1"
}

// S3Client is a plain SDK client of the test server (path-style, the
// environment's credentials), for what a test checks behind sluice's back.
func S3Client(ctx context.Context, endpoint string) (*s3.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region()))
	if err != nil {
		return nil, err
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.UsePathStyle = true
		o.DisableLogOutputChecksumValidationSkipped = true
	}), nil
}

func startS3() (string, error) {
	if ep := os.Getenv("SLUICE_TEST_S3"); ep != "" {
		if os.Getenv("AWS_ACCESS_KEY_ID") == "" || os.Getenv("AWS_SECRET_ACCESS_KEY") == "" {
			return "", errors.New("SLUICE_TEST_S3 is set but AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY is not")
		}
		os.Setenv("AWS_ENDPOINT_URL_S3", ep)
		os.Setenv("AWS_REGION", region())
		return ep, nil
	}
	var key [12]byte
	rand.Read(key[:])
	access, secret := "sluicetest"+hex.EncodeToString(key[:4]), hex.EncodeToString(key[4:])+"secret"
	addr, err := startHTTPServer(goBin{"versitygw", "github.com/versity/versitygw/cmd/versitygw", VersitygwVersion, installHint},
		func(_ int, addr, root string) []string {
			return []string{"--quiet", "--access", access, "--secret", secret, "--port", addr, "posix", root}
		})
	if err != nil {
		return "", err
	}
	os.Setenv("AWS_ACCESS_KEY_ID", access)
	os.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	os.Unsetenv("AWS_SESSION_TOKEN")
	os.Setenv("AWS_REGION", region())
	ep := "http://" + addr
	os.Setenv("AWS_ENDPOINT_URL_S3", ep)
	return ep, nil
}
