package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/objstore"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/bedrock"
)

// bedrockFlags are --provider bedrock's own (docs/providers/bedrock.md):
// the region, credentials and endpoints come from the AWS environment as
// the AWS SDKs read them.
type bedrockFlags struct {
	roleARN      string
	bucket       string
	timeoutHours int
}

func (b *bedrockFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&b.roleARN, "bedrock-role-arn", "", "--provider bedrock: ARN of the service role the batch job reads and writes S3 with (default $SLUICE_BEDROCK_ROLE_ARN)")
	fs.StringVar(&b.bucket, "bedrock-bucket", "", "--provider bedrock: s3://BUCKET/PREFIX where chunk files are put and jobs write their output (default $SLUICE_BEDROCK_BUCKET, else --store when it is s3://, under bedrock/)")
	fs.IntVar(&b.timeoutHours, "bedrock-timeout-hours", bedrock.DefaultTimeoutHours, "--provider bedrock: timeoutDurationInHours sent on job create (24-168); a job that has not finished by then ends, its unprocessed records retried")
}

// registerMinBatch adds --min-batch-requests, a limit of every provider
// (Bedrock's minimum records per job is the one preset that sets it).
func registerMinBatch(fs *pflag.FlagSet, l *sluice.Limits) {
	fs.IntVar(&l.MinBatchRequests, "min-batch-requests", 0, "fewest requests a batch may hold; batches are cut balanced so none falls under it, and a model with fewer requests is refused at plan time (default: the provider's, Bedrock's minimum records per job: 100)")
}

// roleARN is --bedrock-role-arn, else $SLUICE_BEDROCK_ROLE_ARN.
func (b *bedrockFlags) role() string {
	if b.roleARN != "" {
		return b.roleARN
	}
	return os.Getenv("SLUICE_BEDROCK_ROLE_ARN")
}

// location is --bedrock-bucket, else $SLUICE_BEDROCK_BUCKET, else
// --store's bedrock/ when --store is s3://.
func (b *bedrockFlags) location(f *jobFlags) (objstore.Location, error) {
	raw := b.bucket
	if raw == "" {
		raw = os.Getenv("SLUICE_BEDROCK_BUCKET")
	}
	if raw == "" {
		if s := f.storeFlag(); objstore.IsURL(s) {
			loc, err := objstore.Parse(s)
			if err != nil {
				return loc, usageErr("--store: %v", err)
			}
			loc.Key = objstore.Join(loc.Key, "bedrock")
			return loc, nil
		}
		return objstore.Location{}, usageErr("provider bedrock needs an S3 location for its batches: --bedrock-bucket s3://BUCKET/PREFIX (or $SLUICE_BEDROCK_BUCKET, or --store s3://...)")
	}
	loc, err := objstore.Parse(raw)
	if err != nil || !loc.S3 {
		return loc, usageErr("--bedrock-bucket %q: want s3://BUCKET/PREFIX", raw)
	}
	return loc, nil
}

// check refuses, before anything is planned, what a Bedrock job cannot
// run without: a region, the role, the S3 location.
func (b *bedrockFlags) check(f *jobFlags) error {
	if os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" && os.Getenv("AWS_PROFILE") == "" {
		return usageErr("provider bedrock needs an AWS region: set AWS_REGION")
	}
	if b.role() == "" {
		return usageErr("provider bedrock needs the ARN of the service role its jobs run as: --bedrock-role-arn or $SLUICE_BEDROCK_ROLE_ARN")
	}
	if b.timeoutHours < 24 || b.timeoutHours > 168 {
		return usageErr("--bedrock-timeout-hours %d: Bedrock takes 24 to 168", b.timeoutHours)
	}
	_, err := b.location(f)
	return err
}

// newBedrock is the Bedrock client of a run, from the kit's pc: the
// control plane at pc.BaseURL (--base-url or $AWS_ENDPOINT_URL_BEDROCK;
// empty: the SDK's for the region), S3 where the AWS environment says.
// Errors carry their exit codes.
func newBedrock(ctx context.Context, f *jobFlags, b *bedrockFlags, pc provider.Config) (sluice.Provider, error) {
	loc, err := b.location(f)
	if err != nil {
		return nil, err
	}
	pc.APIKey = "" // the AWS credential chain signs every call
	s3opts := objstore.S3Options{Endpoint: objstore.EndpointFromEnv(os.Getenv)}
	c, err := bedrock.New(ctx, bedrock.Config{Config: pc, RoleARN: b.role(), Bucket: loc,
		RuntimeURL: os.Getenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME"), S3: s3opts, TimeoutHours: b.timeoutHours})
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	// The bucket is checked before any work, as --vertex-bucket's and
	// --store's are: a missing one is bad usage (2), refused credentials
	// stop the run (1).
	s3, err := objstore.NewS3(ctx, loc.Bucket, "", s3opts)
	if err == nil {
		err = s3.Check(ctx)
	}
	if err != nil {
		return nil, storeErr(fmt.Errorf("--bedrock-bucket: %w", err))
	}
	return c, nil
}
