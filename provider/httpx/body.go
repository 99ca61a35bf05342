package httpx

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"os"
)

// BodyFunc opens a request body and returns it with its exact length. It is
// called once per attempt, so a retried request re-reads its body from the
// source (a chunk file of 200 MB is streamed again, never buffered).
type BodyFunc func() (io.ReadCloser, int64, error)

// BytesBody sends b.
func BytesBody(b []byte) BodyFunc {
	return func() (io.ReadCloser, int64, error) {
		return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
	}
}

// JSONBody sends v marshalled once, up front.
func JSONBody(v any) (BodyFunc, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return BytesBody(b), nil
}

// FileBody streams the file at path. Its size is taken when the factory is
// made; an attempt that finds the file of another size fails (the chunk
// changed under the request).
func FileBody(path string) (BodyFunc, int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, 0, err
	}
	size := st.Size()
	return func() (io.ReadCloser, int64, error) {
		f, err := openSized(path, size)
		if err != nil {
			return nil, 0, err
		}
		return f, size, nil
	}, size, nil
}

func openSized(path string, size int64) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.Size() != size {
		f.Close()
		return nil, fmt.Errorf("%s: size changed from %d to %d bytes", path, size, st.Size())
	}
	return f, nil
}

// Field is one plain field of a multipart form.
type Field struct{ Name, Value string }

// Multipart returns a body factory for a multipart/form-data body made of
// fields, then one file part (form name fileField, the given filename)
// streamed from path, and the Content-Type header to send with it. The
// framing is built once (the boundary is the same on every attempt, so
// every attempt sends identical bytes); the body is an io.MultiReader of
// the framing before the file, the file, and the closing boundary, with its
// exact length known up front: no chunked encoding and no buffering.
func Multipart(fields []Field, fileField, filename, path string) (BodyFunc, string, int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, "", 0, err
	}
	size := st.Size()
	var pre bytes.Buffer
	w := multipart.NewWriter(&pre)
	for _, f := range fields {
		if err := w.WriteField(f.Name, f.Value); err != nil {
			return nil, "", 0, err
		}
	}
	if _, err := w.CreateFormFile(fileField, filename); err != nil {
		return nil, "", 0, err
	}
	prefix := bytes.Clone(pre.Bytes())
	pre.Reset()
	if err := w.Close(); err != nil { // writes "\r\n--boundary--\r\n"
		return nil, "", 0, err
	}
	suffix := bytes.Clone(pre.Bytes())
	total := int64(len(prefix)) + size + int64(len(suffix))
	open := func() (io.ReadCloser, int64, error) {
		f, err := openSized(path, size)
		if err != nil {
			return nil, 0, err
		}
		r := io.MultiReader(bytes.NewReader(prefix), f, bytes.NewReader(suffix))
		return readCloser{r, f}, total, nil
	}
	return open, w.FormDataContentType(), total, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}
