package main

// The bucket a Vertex or Bedrock job's batches live in is part of what a
// job records (sluice.Job.Bucket): its batches read their input and write
// their output there, so a run that resumes the job with another bucket
// would refuse their output and buy every request again. planDiffs
// compares it, resolved, as it does the endpoint; a job planned before it
// was recorded gets it recorded by its next run (checkSettings).

import (
	"os"
	"strings"

	"github.com/sluice-batch/sluice/objstore"
	"github.com/sluice-batch/sluice/provider"
)

// bucketOf is --vertex-bucket, else $SLUICE_VERTEX_BUCKET, else --store
// when it is gs://.
func (v *vertexFlags) bucketOf(f *jobFlags) string {
	bucket := cmpOr(v.bucket, os.Getenv("SLUICE_VERTEX_BUCKET"))
	if s := f.storeFlag(); bucket == "" && strings.HasPrefix(s, "gs://") {
		bucket = s
	}
	return bucket
}

// providerBucket is the bucket preset p's batches live in as this
// command resolves it, normalised (no trailing "/"), with the flag that
// names it; "" for providers without one, or when none is given (which
// the provider's own checks refuse).
func (n *netFlags) providerBucket(f *jobFlags, p provider.Preset) (bucket, flag string) {
	switch p.Family {
	case provider.FamilyVertex:
		bucket, flag = n.vertex.bucketOf(f), "--vertex-bucket"
	case provider.FamilyBedrock:
		if loc, err := n.bedrock.location(f); err == nil {
			bucket = loc.String()
		}
		flag = "--bedrock-bucket"
	}
	if bucket == "" {
		return "", flag
	}
	if loc, err := objstore.Parse(bucket); err == nil && (loc.S3 || loc.GCS) {
		loc.Key = strings.TrimSuffix(loc.Key, "/")
		bucket = loc.String()
	}
	return strings.TrimSuffix(bucket, "/"), flag
}
