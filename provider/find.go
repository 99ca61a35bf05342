package provider

import (
	"context"
	"fmt"

	"github.com/sluice-batch/sluice"
)

// FindBatchOrFile is the Find of a family that uploads a chunk's file and
// makes a batch from it: the batch made for ref (batch; ids names its
// input file and itself), else the file uploaded for ref (file; fileID
// names it), else nothing. A listing's error names what was looked for and
// the chunk.
func FindBatchOrFile[B, F any](ctx context.Context, ref sluice.BatchRef,
	batch func(context.Context, sluice.BatchRef) (*B, error), ids func(*B) (fileID, batchID string),
	file func(context.Context, sluice.BatchRef) (*F, error), fileID func(*F) string) (string, string, error) {
	b, err := batch(ctx, ref)
	if err != nil {
		return "", "", fmt.Errorf("find batch of chunk %d: %w", ref.Chunk, err)
	}
	if b != nil {
		f, id := ids(b)
		return f, id, nil
	}
	id, err := FileIDOf(ref, file, fileID)(ctx)
	if err != nil {
		return "", "", fmt.Errorf("find file of chunk %d: %w", ref.Chunk, err)
	}
	return id, "", nil
}

// FileIDOf is a lookup of the file uploaded for ref (file; nil when there
// is none) as the reconcile of an upload asks it: the file's id (fileID),
// or "" for none.
func FileIDOf[F any](ref sluice.BatchRef, file func(context.Context, sluice.BatchRef) (*F, error), fileID func(*F) string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		f, err := file(ctx, ref)
		if f == nil {
			return "", err
		}
		return fileID(f), err
	}
}
