package bedrock

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrock"
	"github.com/aws/aws-sdk-go-v2/service/bedrock/types"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/objstore"
	"github.com/sluice-batch/sluice/provider"
)

// Find looks for what a previous run made for ref: a job in the listing
// (ListModelInvocationJobs, submitted within the find window, its name
// containing JobName(ref)) whose clientRequestToken is ClientToken(ref, input)
// and whose input is ref's chunk key (which carries the chunk's digest),
// or ref.FileID when the tracker knows it (provider.MadeFrom); a live job
// is preferred to one that failed, expired or was stopped. Else the chunk
// file in S3 under its key, of the chunk's size (provider.MatchesFile). A
// chunk without a digest adopts no file, and a job only when made from
// ref.FileID.
func (c *Client) Find(ctx context.Context, ref sluice.BatchRef) (fileID, batchID string, err error) {
	return provider.FindBatchOrFile(ctx, ref, c.findJob,
		func(j *types.ModelInvocationJobSummary) (string, string) {
			return inputURI(j.InputDataConfig), aws.ToString(j.JobArn)
		}, c.findInput, func(*objstore.Info) string { return c.uri(c.inputKey(ref)) })
}

// findInput is ref's chunk file in S3 when its name and size prove it
// ref's (provider.MatchesFile), else nil; a chunk without a digest adopts
// none.
func (c *Client) findInput(ctx context.Context, ref sluice.BatchRef) (*objstore.Info, error) {
	if ref.Digest == "" {
		return nil, nil
	}
	info, err := c.store.Stat(ctx, c.inputKey(ref))
	switch {
	case errors.Is(err, objstore.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, storeErr(err)
	case provider.MatchesFile(provider.UploadName(ref), info.Size, ref):
		return &info, nil
	}
	return nil, nil
}

func inputURI(in types.ModelInvocationJobInputDataConfig) string {
	if s3, ok := in.(*types.ModelInvocationJobInputDataConfigMemberS3InputDataConfig); ok {
		return aws.ToString(s3.Value.S3Uri)
	}
	return ""
}

func (c *Client) findJob(ctx context.Context, ref sluice.BatchRef) (*types.ModelInvocationJobSummary, error) {
	want := c.uri(c.inputKey(ref))
	if ref.FileID != "" {
		want = ref.FileID
	}
	token := ClientToken(ref, want)
	if ref.Digest == "" && ref.FileID == "" {
		return nil, nil // nothing proves a job is this chunk's
	}
	in := &bedrock.ListModelInvocationJobsInput{
		NameContains:    aws.String(JobName(ref)),
		SubmitTimeAfter: aws.Time(c.Cutoff()),
		SortBy:          types.SortJobsByCreationTime, SortOrder: types.SortOrderDescending,
		MaxResults: aws.Int32(100),
	}
	jobs := provider.Listing[types.ModelInvocationJobSummary]{Page: func(ctx context.Context, token string) (provider.Page[types.ModelInvocationJobSummary], error) {
		q := *in
		if token != "" {
			q.NextToken = aws.String(token)
		}
		page, err := c.api.ListModelInvocationJobs(ctx, &q)
		if err != nil {
			return provider.Page[types.ModelInvocationJobSummary]{}, c.apiErr(err)
		}
		return provider.Page[types.ModelInvocationJobSummary]{Items: page.InvocationJobSummaries, Next: aws.ToString(page.NextToken)}, nil
	}}
	return jobs.Adopt(ctx, func(j *types.ModelInvocationJobSummary) bool {
		return aws.ToString(j.ClientRequestToken) == token && inputURI(j.InputDataConfig) == want
	}, func(j *types.ModelInvocationJobSummary) sluice.BatchStatus { return statuses[j.Status] })
}
