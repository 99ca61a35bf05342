package bedrock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
)

var _ sluice.RealtimeCaller = (*Client)(nil)

// CallRealtime implements sluice.RealtimeCaller: the record's modelInput
// is POSTed, as written, to the Bedrock runtime's InvokeModel
// ({runtime}/model/{modelId}/invoke), or Converse for a Converse chunk,
// signed with SigV4 by the SDK's signer (provider.CallSync: a connection
// lost after the body was sent is never repeated). The answer is the
// record's result as a batch record's modelOutput would have been.
func (c *Client) CallRealtime(ctx context.Context, ref sluice.BatchRef, item []byte) (sluice.Result, error) {
	l := gjson.ParseBytes(item)
	id, in := l.Get("recordId"), l.Get("modelInput")
	if id.Type != gjson.String || id.Str == "" || !in.IsObject() {
		return sluice.Result{}, fmt.Errorf("chunk %d: an item is not a Bedrock record line", ref.Chunk)
	}
	op := "invoke"
	if provider.BedrockConverse(ref.URL, ref.Model) {
		op = "converse"
	}
	return provider.CallSync(ctx, c.rt, provider.SyncCall{Job: ref.Job, CustomID: id.Str, Body: []byte(in.Raw),
		URL: c.runtime + "/model/" + url.PathEscape(ref.Model) + "/" + op,
		Answer: func(resp *http.Response, b []byte, res *sluice.Result) error {
			if !gjson.ValidBytes(b) {
				return provider.NotAnAnswer(id.Str, "JSON")
			}
			res.Line.Response = &sluice.Response{StatusCode: resp.StatusCode, RequestID: resp.Header.Get("X-Amzn-Requestid"), Body: b}
			res.Kind, res.Usage = provider.StatusKind(resp.StatusCode), usageOf(gjson.ParseBytes(b))
			return nil
		}})
}

// awsErrors reads a rest-json error body: {"message"} (or "Message"),
// the exception's name in "__type" when the body carries it.
func awsErrors(body []byte) (code, message string) {
	r := gjson.ParseBytes(body)
	message = r.Get("message").String()
	if message == "" {
		message = r.Get("Message").String()
	}
	return r.Get("__type").String(), message
}

// sigv4 signs each request for service bedrock with the SDK's signer and
// the credentials of the AWS configuration.
type sigv4 struct {
	base   http.RoundTripper
	creds  aws.CredentialsProvider
	region string
}

func (s sigv4) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	sum := sha256.Sum256(body)
	signed := req.Clone(req.Context())
	signed.Body, signed.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	cr, err := s.creds.Retrieve(req.Context())
	if err != nil {
		return nil, fmt.Errorf("AWS credentials: %w", err)
	}
	if err := v4.NewSigner().SignHTTP(req.Context(), cr, signed, hex.EncodeToString(sum[:]), "bedrock", s.region, time.Now()); err != nil {
		return nil, err
	}
	return s.base.RoundTrip(signed)
}
