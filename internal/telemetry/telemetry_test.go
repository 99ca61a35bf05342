package telemetry

import (
	"net/url"
	"testing"
)

func TestEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"http://h/v1/batches":                                          "/v1/batches",
		"http://h/v1/batches/batch_0001a2b3/cancel":                    "/v1/batches/{id}/cancel",
		"http://h/v1/files/file-abc123def456/content":                  "/v1/files/{id}/content",
		"http://h/v1beta/models/gemini-2.5-flash:batchGenerateContent": "/v1beta/models/{id}:batchGenerateContent",
		"http://h/v1/messages/batches":                                 "/v1/messages/batches",
	} {
		u, _ := url.Parse(in)
		if got := Endpoint(u); got != want {
			t.Errorf("Endpoint(%s) = %s, want %s", in, got, want)
		}
	}
}
