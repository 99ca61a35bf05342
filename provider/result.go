package provider

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/iobuf"
)

// UploadName is the name a chunk file is uploaded under:
// sluice-<job>-c<chunk>-a<attempt>-d<digest>.jsonl, where digest is
// ref.Digest (sluice.ChunkDigest); without one (a chunk an earlier version
// began to send), sluice-<job>-c<chunk>-a<attempt>.jsonl. Find matches it
// after a crash, so it must stay stable across releases. Characters of the
// job id outside [A-Za-z0-9._-] become '_'.
func UploadName(ref sluice.BatchRef) string {
	return BaseName(ref) + ".jsonl"
}

// BaseName is UploadName without its extension: the display name of a
// batch for providers that name batches (Gemini).
func BaseName(ref sluice.BatchRef) string {
	s := "sluice-" + safeName(ref.Job) + "-c" + strconv.FormatInt(ref.Chunk, 10) +
		"-a" + strconv.Itoa(ref.Attempt)
	if ref.Digest != "" {
		s += "-d" + safeName(ref.Digest)
	}
	return s
}

// UploadedSize is the size of ref's chunk file as uploaded (its size on
// disk, else ref.Bytes), which Find matches against file listings.
func UploadedSize(ref sluice.BatchRef) int64 {
	if st, err := os.Stat(ref.Path); err == nil {
		return st.Size()
	}
	return ref.Bytes
}

// Metadata keys put on batches (OpenAI family, Mistral) to find them after
// a crash. MetaDigest carries the chunk's content digest.
const (
	MetaJob     = "sluice_job"
	MetaChunk   = "sluice_chunk"
	MetaAttempt = "sluice_attempt"
	MetaDigest  = "sluice_digest"
)

// Metadata is the batch metadata naming ref, with its digest when it has
// one.
func Metadata(ref sluice.BatchRef) map[string]string {
	md := map[string]string{
		MetaJob:     ref.Job,
		MetaChunk:   strconv.FormatInt(ref.Chunk, 10),
		MetaAttempt: strconv.Itoa(ref.Attempt),
	}
	if ref.Digest != "" {
		md[MetaDigest] = ref.Digest
	}
	return md
}

// MatchesMetadata reports whether a batch whose metadata is md, made from
// the file inputFileID ("" when the provider does not say), may be adopted
// for ref after a crash: its metadata names ref's job, chunk and attempt,
// and
//   - when the tracker knows ref's uploaded file (ref.FileID), the batch was
//     made from that file;
//   - when ref has a digest, the metadata carries the same digest;
//   - when it has none (a chunk an earlier version began to send), only a
//     batch made from ref.FileID is adopted: a name is no proof of content.
func MatchesMetadata(md map[string]string, inputFileID string, ref sluice.BatchRef) bool {
	if md[MetaJob] != ref.Job || md[MetaChunk] != strconv.FormatInt(ref.Chunk, 10) ||
		md[MetaAttempt] != strconv.Itoa(ref.Attempt) {
		return false
	}
	return MadeFrom(inputFileID, ref) && (ref.Digest == "" || md[MetaDigest] == ref.Digest)
}

// MadeFrom reports whether a batch made from inputFileID may be ref's as
// far as its input file tells: it must be ref.FileID when the tracker
// knows that; a chunk without a digest must know it.
func MadeFrom(inputFileID string, ref sluice.BatchRef) bool {
	if ref.FileID != "" {
		return inputFileID == ref.FileID
	}
	return ref.Digest != ""
}

// MatchesFile reports whether a file listed under name with size bytes (0
// when the listing does not say) may be adopted as ref's upload: its name
// is UploadName(ref), which carries ref's digest, and its size is ref's.
// A chunk without a digest adopts no file: its name would prove nothing.
func MatchesFile(name string, size int64, ref sluice.BatchRef) bool {
	if ref.Digest == "" || name != UploadName(ref) {
		return false
	}
	want := UploadedSize(ref)
	return want <= 0 || size == want
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, s)
}

// SafeFileName maps an id to a string usable as a file name.
func SafeFileName(s string) string { return safeName(s) }

// StatusKind classifies a request by the HTTP status its endpoint answered:
// 2xx succeeded; 408, 429 and 5xx (Anthropic's 529 included) retryable;
// every other status failed for good. 408 is retryable although it is a 4xx:
// it is a timeout, not a verdict on the request.
func StatusKind(status int) sluice.ResultKind {
	switch {
	case status >= 200 && status < 300:
		return sluice.ResultSucceeded
	case status == 408 || status == 429 || status >= 500:
		return sluice.ResultRetryable
	}
	return sluice.ResultFailed
}

// retryableCodes are line-level error codes (no HTTP answer) that mean the
// request was not executed or hit a transient condition.
var retryableCodes = map[string]bool{
	string(sluice.CodeBatchExpired):   true,
	string(sluice.CodeBatchCancelled): true,
	"batch_canceled":                  true,
	string(sluice.CodeCancelled):      true,
	"canceled":                        true,
	"expired":                         true,
	"rate_limit_exceeded":             true,
	"server_error":                    true,
	"timeout":                         true,
	"internal_error":                  true,
}

// CodeKind classifies a line-level error code (a result without an HTTP
// answer): the codes of retryableCodes are retryable, every other code is
// final.
func CodeKind(code string) sluice.ResultKind {
	if retryableCodes[strings.ToLower(code)] {
		return sluice.ResultRetryable
	}
	return sluice.ResultFailed
}

// ErrMalformed is matched (errors.Is) by every MalformedError.
var ErrMalformed = sluice.ErrMalformed

// MalformedError is a result line that does not parse (see
// sluice.MalformedError). Decoders skip such lines and return a
// *sluice.MalformedLines naming them; the dispatcher treats their requests
// as missing, so they are retried.
type MalformedError = sluice.MalformedError

// DefaultMaxLine bounds one result line (responses carrying images or long
// embeddings reach tens of MB).
const DefaultMaxLine = 256 << 20

// LineReader reads JSONL without loading the file: one line at a time,
// reusing its buffer, up to a maximum line length.
type LineReader struct {
	r    *bufio.Reader
	name string
	max  int
	n    int
	buf  []byte
}

// NewLineReader reads r, named name in errors; max <= 0 means
// DefaultMaxLine.
func NewLineReader(r io.Reader, name string, max int) *LineReader {
	if max <= 0 {
		max = DefaultMaxLine
	}
	return &LineReader{r: bufio.NewReaderSize(r, iobuf.Size(r, 1<<20)), name: name, max: max}
}

// Next returns the next non-blank line without its line ending, valid until
// the next call, or io.EOF. A line longer than the maximum is a
// *MalformedError, after which Next goes on with the following line.
func (l *LineReader) Next() ([]byte, error) {
	for {
		line, err := l.readLine()
		if err != nil {
			return nil, err
		}
		line = bytes.TrimSpace(line)
		if len(line) > 0 {
			return line, nil
		}
	}
}

func (l *LineReader) readLine() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
		frag, err := l.r.ReadSlice('\n')
		if len(l.buf)+len(frag) > l.max+2 { // +2 for \r\n
			l.n++
			// Skip the rest of the line, so the next call starts at the
			// next line.
			for err == bufio.ErrBufferFull {
				_, err = l.r.ReadSlice('\n')
			}
			if err != nil && err != io.EOF {
				return nil, fmt.Errorf("read %s: %w", l.name, err)
			}
			return nil, &MalformedError{File: l.name, Line: l.n, Err: fmt.Errorf("line longer than %d bytes", l.max)}
		}
		switch {
		case err == nil:
			l.n++
			if len(l.buf) == 0 {
				return frag, nil // no copy for lines that fit the buffer
			}
			l.buf = append(l.buf, frag...)
			return l.buf, nil
		case errors.Is(err, bufio.ErrBufferFull):
			l.buf = append(l.buf, frag...)
		case err == io.EOF:
			if len(frag) == 0 && len(l.buf) == 0 {
				return nil, io.EOF
			}
			l.n++
			l.buf = append(l.buf, frag...)
			return l.buf, nil
		default:
			return nil, fmt.Errorf("read %s: %w", l.name, err)
		}
	}
}

// Line is the 1-based number of the line last returned.
func (l *LineReader) Line() int { return l.n }

// Malformed wraps err as a MalformedError at the current line.
func (l *LineReader) Malformed(err error) error {
	return &MalformedError{File: l.name, Line: l.n, Err: err}
}

// DecodeJSONL streams JSONL result files, one line at a time, turns each
// line into a Result with decodeLine and calls fn with it. A line that does
// not decode (or is over maxLine) is skipped and decoding goes on; the
// skipped lines come back as a *sluice.MalformedLines naming each
// file:line. Any other error (a file that cannot be read, fn failing) ends
// it.
func DecodeJSONL(ctx context.Context, files []string, maxLine int, decodeLine func([]byte) (sluice.Result, error), fn func(sluice.Result) error) error {
	var bad sluice.MalformedLines
	for _, path := range files {
		if err := decodeJSONLFile(ctx, path, maxLine, &bad, decodeLine, fn); err != nil {
			return err
		}
	}
	return bad.Err()
}

func decodeJSONLFile(ctx context.Context, path string, maxLine int, bad *sluice.MalformedLines, decodeLine func([]byte) (sluice.Result, error), fn func(sluice.Result) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return DecodeJSONLReader(ctx, f, path, maxLine, bad, decodeLine, fn)
}

// DecodeJSONLReader is DecodeJSONL's loop over one stream of JSONL result
// lines (a file, or an HTTP answer read as it arrives): each line is turned
// into a Result with decodeLine and handed to fn. A line that does not
// decode (or is over maxLine) is added to bad, as name:line, and skipped.
// Any other error (r failing, fn failing) ends it and is returned as is.
// Memory is one buffer (NewLineReader), plus the longest line up to maxLine.
func DecodeJSONLReader(ctx context.Context, r io.Reader, name string, maxLine int, bad *sluice.MalformedLines, decodeLine func([]byte) (sluice.Result, error), fn func(sluice.Result) error) error {
	lr := NewLineReader(r, name, maxLine)
	for {
		line, err := lr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if bad.AddErr(err) {
				continue // a line over the bound: skipped
			}
			return err
		}
		if lr.Line()%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		res, err := decodeLine(line)
		if err != nil {
			bad.AddErr(lr.Malformed(err))
			continue
		}
		if err := fn(res); err != nil {
			return err
		}
	}
}

// Adopt chooses, among the batches a listing shows for one chunk, the one
// to adopt after a crash: the first live one, else the first that ended
// (failed, expired, cancelled or cancelling), which the dispatcher then
// retries from.
type Adopt[T any] struct {
	live, ended *T
}

// Offer considers b, whose status is st; it reports whether a live batch
// was found (the search can stop).
func (a *Adopt[T]) Offer(b *T, st sluice.BatchStatus) bool {
	switch st {
	case sluice.BatchFailed, sluice.BatchExpired, sluice.BatchCancelled, sluice.BatchCancelling:
		if a.ended == nil {
			a.ended = b
		}
		return false
	}
	a.live = b
	return true
}

// Best is the batch to adopt, or nil.
func (a *Adopt[T]) Best() *T {
	if a.live != nil {
		return a.live
	}
	return a.ended
}
