package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// CreateBatch POSTs a create call (body, JSON) to url and maps its answer,
// a T, with toBatch, for every client whose create is not idempotent. A
// connection lost after the request was sent is settled by find (what the
// call made, or nil) before the create is repeated, so a lost answer does
// not buy the batch twice; an adopted batch is logged.
func CreateBatch[T any](ctx context.Context, hc *httpx.Client, url string, body httpx.BodyFunc, ref sluice.BatchRef,
	find func(context.Context) (*T, error), toBatch func(*T) sluice.Batch, log zerolog.Logger) (sluice.Batch, error) {
	var adopted *T
	call := httpx.Call{
		Method: http.MethodPost, URL: url, Header: http.Header{"Content-Type": {"application/json"}}, Body: body,
		Reconcile: func(ctx context.Context) (bool, error) {
			b, err := find(ctx)
			adopted = b
			return b != nil, err
		},
	}
	var w T
	switch err := hc.JSON(ctx, call, &w); {
	case errors.Is(err, httpx.ErrReconciled):
		b := toBatch(adopted)
		log.Info().Str("batch_id", b.ID).Int64("chunk", ref.Chunk).Msg("create answer lost; adopted the created batch")
		return b, nil
	case err != nil:
		return sluice.Batch{}, fmt.Errorf("create batch for chunk %d: %w", ref.Chunk, err)
	}
	b := toBatch(&w)
	if b.ID == "" {
		return sluice.Batch{}, fmt.Errorf("create batch for chunk %d: answer carries no batch id", ref.Chunk)
	}
	return b, nil
}
