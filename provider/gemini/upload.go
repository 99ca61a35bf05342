package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// errSessionGone: the upload session is unknown or cancelled at the
// server; the upload starts over with a new one.
var errSessionGone = errors.New("upload session gone")

// maxStarts bounds how many upload sessions one Upload opens.
const maxStarts = 3

// Upload sends the chunk file with the Files API's resumable protocol:
// start (POST /upload/{v}/files, X-Goog-Upload-Command: start, the size and
// type in X-Goog-Upload-Header-*), then the bytes in ChunkSize requests to
// the upload URL the start answered (X-Goog-Upload-Offset, "upload", and
// "upload, finalize" on the last). A chunk that fails (a broken
// connection, 429, 5xx) is not simply sent again: the session is queried
// (X-Goog-Upload-Command: query) and the upload resumes from the offset the
// server reports, or ends there if the server has finalized it. A session
// the server no longer knows is started over. It returns the file's name,
// files/<id>.
func (c *Client) Upload(ctx context.Context, ref sluice.BatchRef) (string, error) {
	st, err := os.Stat(ref.Path)
	if err != nil {
		return "", fmt.Errorf("upload chunk %d: %w", ref.Chunk, err)
	}
	size := st.Size()
	name := provider.UploadName(ref)
	for start := 1; ; start++ {
		upURL, gran, err := c.startUpload(ctx, name, size)
		if err != nil {
			return "", fmt.Errorf("upload chunk %d: start: %w", ref.Chunk, keyErr(err))
		}
		f, err := c.sendChunks(ctx, upURL, ref.Path, size, gran)
		if errors.Is(err, errSessionGone) && start < maxStarts {
			c.Log.Warn().Int64("chunk", ref.Chunk).Msg("upload session lost at the server; starting the upload over")
			continue
		}
		if err != nil {
			return "", fmt.Errorf("upload chunk %d: %w", ref.Chunk, keyErr(err))
		}
		if f.Name == "" {
			return "", fmt.Errorf("upload chunk %d: the final answer carries no file name", ref.Chunk)
		}
		return f.Name, nil
	}
}

// startUpload opens a session and returns its upload URL, with the scheme
// and host of the base URL (as the Google SDKs do, so the key goes only to
// the configured host), and the granularity the server announced.
func (c *Client) startUpload(ctx context.Context, name string, size int64) (string, int64, error) {
	body, err := httpx.JSONBody(map[string]any{"file": map[string]any{"displayName": name, "mimeType": c.mime}})
	if err != nil {
		return "", 0, err
	}
	call := httpx.Call{Method: http.MethodPost, URL: c.urlAt("/upload/"+c.version+"/files", nil), Body: body,
		Header: http.Header{
			"Content-Type":                        {"application/json"},
			"X-Goog-Upload-Protocol":              {"resumable"},
			"X-Goog-Upload-Command":               {"start"},
			"X-Goog-Upload-Header-Content-Length": {strconv.FormatInt(size, 10)},
			"X-Goog-Upload-Header-Content-Type":   {c.mime},
		}}
	var raw string
	var gran int64
	err = c.HC.Send(ctx, call, func(resp *http.Response) error {
		defer resp.Body.Close()
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		raw = resp.Header.Get("X-Goog-Upload-URL")
		gran, _ = strconv.ParseInt(resp.Header.Get("X-Goog-Upload-Chunk-Granularity"), 10, 64)
		return nil
	})
	if err != nil {
		return "", 0, err
	}
	if raw == "" {
		return "", 0, errors.New("the start answer carries no X-Goog-Upload-URL")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", 0, fmt.Errorf("X-Goog-Upload-URL %q: %w", raw, err)
	}
	u.Scheme, u.Host = c.URL.Scheme, c.URL.Host
	return u.String(), gran, nil
}

// chunkAnswer is what the server says after a chunk or a query.
type chunkAnswer struct {
	status   string // X-Goog-Upload-Status: active, final, cancelled
	received int64  // X-Goog-Upload-Size-Received, -1 when absent
	file     fileObject
}

func readChunkAnswer(resp *http.Response) (chunkAnswer, error) {
	defer resp.Body.Close()
	a := chunkAnswer{status: strings.ToLower(resp.Header.Get("X-Goog-Upload-Status")), received: -1}
	if v := resp.Header.Get("X-Goog-Upload-Size-Received"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			a.received = n
		}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return a, &httpx.ReadError{Err: err}
	}
	if a.status == "final" {
		var w struct {
			File fileObject `json:"file"`
		}
		if err := json.Unmarshal(b, &w); err != nil {
			return a, fmt.Errorf("final answer: %w", err)
		}
		a.file = w.File
	}
	return a, nil
}

// sendChunks sends the file from offset 0, resuming from the server's
// offset after a failed chunk.
func (c *Client) sendChunks(ctx context.Context, upURL, path string, size, gran int64) (fileObject, error) {
	chunk := c.chunk
	if gran > 0 && chunk%gran != 0 {
		chunk = (chunk/gran + 1) * gran
	}
	var offset int64
	failures := 0
	for {
		n := min(chunk, size-offset)
		last := offset+n == size
		cmd := "upload"
		if last {
			cmd = "upload, finalize"
		}
		var a chunkAnswer
		call := httpx.Call{Method: http.MethodPost, URL: upURL, Body: sectionBody(path, size, offset, n),
			Header: http.Header{"X-Goog-Upload-Command": {cmd}, "X-Goog-Upload-Offset": {strconv.FormatInt(offset, 10)}}}
		err := c.once.Send(ctx, call, func(resp *http.Response) (err error) {
			a, err = readChunkAnswer(resp)
			return err
		})
		switch {
		case err == nil && last && a.status == "final":
			return a.file, nil
		case err == nil && !last && a.status == "active":
			offset, failures = offset+n, 0
			continue
		case err == nil && a.status == "":
			err = errors.New("the chunk answer carries no X-Goog-Upload-Status") // the SDKs retry those
		case err == nil:
			return fileObject{}, fmt.Errorf("after %d bytes, upload status %q, want %s", offset+n, a.status, map[bool]string{true: "final", false: "active"}[last])
		}
		if ctx.Err() != nil {
			return fileObject{}, ctx.Err()
		}
		var ae *sluice.APIError
		if errors.As(err, &ae) {
			switch {
			case ae.Status == http.StatusNotFound:
				return fileObject{}, fmt.Errorf("%w: %w", errSessionGone, err)
			case !ae.Retryable() && ae.Status != http.StatusBadRequest:
				return fileObject{}, err
			}
			// 400 too: an offset the server disagrees with is settled by
			// the query below.
		}
		failures++
		if failures >= c.retry.MaxAttempts {
			return fileObject{}, fmt.Errorf("chunk at offset %d: %d attempts failed: %w", offset, failures, err)
		}
		wait := c.retry.Backoff(failures, 0.5)
		c.Log.Debug().Int64("offset", offset).Dur("wait", wait).Str("error", c.HC.Redact(err.Error())).Msg("upload chunk failed; querying the session")
		select {
		case <-ctx.Done():
			return fileObject{}, ctx.Err()
		case <-c.Clock.After(wait):
		}
		f, at, err := c.resumeAt(ctx, upURL, size, offset)
		if err != nil || f != nil {
			return derefFile(f), err
		}
		offset = at
	}
}

// resumeAt queries the session after a failed chunk: the file when the
// upload is complete after all, else the offset to resume from.
func (c *Client) resumeAt(ctx context.Context, upURL string, size, offset int64) (*fileObject, int64, error) {
	q, err := c.query(ctx, upURL)
	if err != nil {
		var ae *sluice.APIError
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
			return nil, 0, fmt.Errorf("%w: %w", errSessionGone, err)
		}
		return nil, 0, fmt.Errorf("query upload session: %w", err)
	}
	switch {
	case q.status == "final":
		if q.file.Name == "" {
			return nil, 0, errors.New("the session is final but the query answer carries no file")
		}
		return &q.file, 0, nil
	case q.status != "active":
		return nil, 0, fmt.Errorf("%w: status %q", errSessionGone, q.status)
	case q.received < 0 || q.received > size:
		return nil, 0, fmt.Errorf("query answered %d bytes received of %d", q.received, size)
	}
	if q.received != offset {
		c.Log.Info().Int64("offset", offset).Int64("server_offset", q.received).Msg("upload resumes from the server's offset")
	}
	return nil, q.received, nil
}

func derefFile(f *fileObject) fileObject {
	if f == nil {
		return fileObject{}
	}
	return *f
}

// query asks the session how many bytes it holds.
func (c *Client) query(ctx context.Context, upURL string) (chunkAnswer, error) {
	var a chunkAnswer
	err := c.HC.Send(ctx, httpx.Call{Method: http.MethodPost, URL: upURL,
		Header: http.Header{"X-Goog-Upload-Command": {"query"}}}, func(resp *http.Response) (err error) {
		a, err = readChunkAnswer(resp)
		return err
	})
	return a, err
}

// sectionBody streams n bytes of the file at path from offset.
func sectionBody(path string, size, offset, n int64) httpx.BodyFunc {
	return func() (io.ReadCloser, int64, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, 0, err
		}
		if st, err := f.Stat(); err != nil || st.Size() != size {
			f.Close()
			if err == nil {
				err = fmt.Errorf("%s: size changed from %d to %d bytes", path, size, st.Size())
			}
			return nil, 0, err
		}
		return readCloser{io.NewSectionReader(f, offset, n), f}, n, nil
	}
}

type readCloser struct {
	io.Reader
	io.Closer
}
