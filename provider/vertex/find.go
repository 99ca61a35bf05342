package vertex

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/objstore"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// listPage is the page size asked of the job listing.
const listPage = 100

// Find looks for what a previous run made for ref: the job whose
// displayName is DisplayName(ref) (which carries ref's content digest)
// and whose one input is ref's file (the tracker's file id, else the
// object named after ref's digest: provider.MadeFrom), listed with
// filter display_name="…"; else ref's chunk file in Cloud Storage with
// ref's size (provider.MatchesFile). A chunk without a digest adopts no
// file. When several jobs match (a create repeated after a lost answer),
// a live one is preferred.
func (c *Client) Find(ctx context.Context, ref sluice.BatchRef) (fileID, batchID string, err error) {
	return provider.FindBatchOrFile(ctx, ref, c.findJob, func(j *job) (string, string) { return j.inputURI(), j.Name },
		c.findInput, func(*objstore.Info) string { return c.bucket + inputKey(ref) })
}

// findInput is ref's chunk file in Cloud Storage when its name and size
// prove it ref's (provider.MatchesFile), else nil; a chunk without a
// digest adopts none.
func (c *Client) findInput(ctx context.Context, ref sluice.BatchRef) (*objstore.Info, error) {
	if ref.Digest == "" {
		return nil, nil
	}
	in, err := c.store.Stat(ctx, inputKey(ref))
	switch {
	case errors.Is(err, objstore.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, err
	case provider.MatchesFile(provider.UploadName(ref), in.Size, ref):
		return &in, nil
	}
	return nil, nil
}

func (c *Client) findJob(ctx context.Context, ref sluice.BatchRef) (*job, error) {
	want := DisplayName(ref)
	ownInput := c.bucket + inputKey(ref)
	jobs := provider.Listing[job]{
		Page: func(ctx context.Context, token string) (provider.Page[job], error) {
			q := url.Values{"pageSize": {strconv.Itoa(listPage)}, "filter": {`display_name="` + want + `"`}}
			if token != "" {
				q.Set("pageToken", token)
			}
			var l struct {
				Jobs []job  `json:"batchPredictionJobs"`
				Next string `json:"nextPageToken"`
			}
			err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url(c.parent+"/batchPredictionJobs", q)}, &l)
			return provider.Page[job]{Items: l.Jobs, Next: l.Next}, err
		},
		Created: func(j *job) time.Time { return j.CreateTime },
		Cutoff:  c.Cutoff(),
	}
	return jobs.Adopt(ctx, func(j *job) bool {
		in := j.inputURI()
		return j.DisplayName == want && provider.MadeFrom(in, ref) && (ref.FileID != "" || in == ownInput)
	}, func(j *job) sluice.BatchStatus { return j.toBatch().Status })
}
