package main

// --provider vertex: Vertex AI batch prediction (docs/providers/vertex.md).
// The project and location come from GOOGLE_CLOUD_PROJECT and
// GOOGLE_CLOUD_LOCATION (or the flags below), the endpoint from --base-url
// or GOOGLE_VERTEX_BASE_URL, credentials from $GOOGLE_OAUTH_ACCESS_TOKEN
// else Application Default Credentials, and Cloud Storage (chunk files,
// predictions) from --vertex-bucket, else --store when it is gs://.

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/vertex"
)

// vertexFlags are the flags of --provider vertex.
type vertexFlags struct {
	project, location, bucket, apiVersion string
}

func (v *vertexFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&v.project, "vertex-project", "", "--provider vertex: Google Cloud project (default $GOOGLE_CLOUD_PROJECT)")
	fs.StringVar(&v.location, "vertex-location", "", "--provider vertex: location of the jobs, such as us-central1 or global (default $GOOGLE_CLOUD_LOCATION)")
	fs.StringVar(&v.bucket, "vertex-bucket", "", "--provider vertex: gs://BUCKET/PREFIX where chunk files are put and predictions written (default $SLUICE_VERTEX_BUCKET, else --store when it is gs://)")
	fs.StringVar(&v.apiVersion, "vertex-api-version", "", "--provider vertex: API version put after the base URL (default v1; the google-genai SDKs use v1beta1)")
}

// newVertex builds the Vertex client: every missing setting is a usage
// error naming the flag and the variable; errors carry their exit codes.
func newVertex(ctx context.Context, f *jobFlags, n *netFlags, pc provider.Config) (sluice.Provider, error) {
	v, p := n.vertex, pc.Preset
	project := cmpOr(v.project, os.Getenv("GOOGLE_CLOUD_PROJECT"))
	location := cmpOr(v.location, os.Getenv("GOOGLE_CLOUD_LOCATION"))
	bucket := v.bucketOf(f)
	switch {
	case project == "":
		return nil, usageErr("provider %s needs a project: --vertex-project or $GOOGLE_CLOUD_PROJECT", p.Name)
	case location == "":
		return nil, usageErr("provider %s needs a location: --vertex-location or $GOOGLE_CLOUD_LOCATION", p.Name)
	case bucket == "":
		return nil, usageErr("provider %s needs Cloud Storage for its input and output: --vertex-bucket gs://BUCKET/PREFIX (or $SLUICE_VERTEX_BUCKET, or --store gs://…)", p.Name)
	}
	c, err := vertex.New(ctx, vertex.Config{Config: pc, APIVersion: v.apiVersion, Project: project, Location: location, Bucket: bucket,
		GCS: gcsOptions()})
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	// The bucket is checked before any work, as --store's is: a missing
	// one is bad usage (2), refused credentials stop the run (1).
	if err := c.Store().Check(ctx); err != nil {
		return nil, storeErr(fmt.Errorf("--vertex-bucket: %w", err))
	}
	return c, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
