package lifecycle

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
)

// MixedLocal is the provider of --provider local: the built-in emulator
// serves the OpenAI, Anthropic, Cloudflare and Gemini batch APIs on one
// port, so local takes lines of every family. Each chunk goes to the client of its url's family
// (provider.FamilyOf); its chunk file is already in that family's format
// (provider.MixedCodec).
type MixedLocal struct {
	openai, anthropic, cloudflare, gemini sluice.Provider
	codec                                 sluice.Codec
}

// NewMixedLocal routes each chunk of --provider local to the client of
// its family, each calling the in-process emulator; codec is local's.
func NewMixedLocal(openai, anthropic, cloudflare, gemini sluice.Provider, codec sluice.Codec) *MixedLocal {
	return &MixedLocal{openai: openai, anthropic: anthropic, cloudflare: cloudflare, gemini: gemini, codec: codec}
}

// noFile is the file id of a chunk whose family sends its body with the
// create call: MixedLocal uses files (the OpenAI family does), so the
// dispatcher uploads every chunk first; for the others the upload is this.
const noFile = "local-no-file"

func (m *MixedLocal) route(url string) sluice.Provider {
	switch provider.FamilyOf(url) {
	case provider.FamilyAnthropic:
		return m.anthropic
	case provider.FamilyCloudflare:
		return m.cloudflare
	case provider.FamilyGemini:
		return m.gemini
	}
	return m.openai
}

func (m *MixedLocal) Name() string          { return "local" }
func (m *MixedLocal) Codec() sluice.Codec   { return m.codec }
func (m *MixedLocal) Limits() sluice.Limits { return m.openai.Limits() }

// Capabilities: files (families without them get a stand-in file id), and
// Untagged: Anthropic batches name no chunk, so creates go one at a time.
func (m *MixedLocal) Capabilities() sluice.Capabilities {
	return sluice.Capabilities{Files: true, Untagged: true}
}

func (m *MixedLocal) Upload(ctx context.Context, ref sluice.BatchRef) (string, error) {
	p := m.route(ref.URL)
	if !p.Capabilities().Files {
		return noFile, nil
	}
	return p.Upload(ctx, ref)
}

func (m *MixedLocal) Create(ctx context.Context, ref sluice.BatchRef, fileID string) (sluice.Batch, error) {
	p := m.route(ref.URL)
	if !p.Capabilities().Files {
		fileID = ""
	}
	return p.Create(ctx, ref, fileID)
}

func (m *MixedLocal) Poll(ctx context.Context, ref sluice.BatchRef, batchID string) (sluice.Batch, error) {
	return m.route(ref.URL).Poll(ctx, ref, batchID)
}

func (m *MixedLocal) Fetch(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, dir string) ([]string, error) {
	return m.route(ref.URL).Fetch(ctx, ref, b, dir)
}

func (m *MixedLocal) Decode(ctx context.Context, ref sluice.BatchRef, files []string, lookup func(int) (string, bool), fn func(sluice.Result) error) error {
	return m.route(ref.URL).Decode(ctx, ref, files, lookup, fn)
}

// StreamsResults: a chunk's results are streamed when its family's client
// streams them (sluice.ResultStreamer: the OpenAI family).
func (m *MixedLocal) StreamsResults(ref sluice.BatchRef) bool {
	rs, ok := m.route(ref.URL).(sluice.ResultStreamer)
	return ok && rs.StreamsResults(ref)
}

func (m *MixedLocal) StreamResults(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, lookup func(int) (string, bool), fn func(sluice.Result) error) error {
	rs, ok := m.route(ref.URL).(sluice.ResultStreamer)
	if !ok {
		return fmt.Errorf("provider local: the results of %s batches are not streamed", provider.FamilyOf(ref.URL))
	}
	return rs.StreamResults(ctx, ref, b, lookup, fn)
}

// Cancel knows the family by the emulator's batch ids: msgbatch_...
// (Anthropic), batch_... (OpenAI), batches/... (Gemini), else a Workers AI
// request id.
func (m *MixedLocal) Cancel(ctx context.Context, batchID string) (sluice.Batch, error) {
	switch {
	case strings.HasPrefix(batchID, "batches/"):
		return m.gemini.Cancel(ctx, batchID)
	case strings.HasPrefix(batchID, "msgbatch_"):
		return m.anthropic.Cancel(ctx, batchID)
	case strings.HasPrefix(batchID, "batch_"):
		return m.openai.Cancel(ctx, batchID)
	}
	return m.cloudflare.Cancel(ctx, batchID)
}

func (m *MixedLocal) Find(ctx context.Context, ref sluice.BatchRef) (string, string, error) {
	p := m.route(ref.URL)
	fileID, batchID, err := p.Find(ctx, ref)
	if !p.Capabilities().Files && err == nil && fileID == "" {
		fileID = noFile // its "upload" always happened
	}
	return fileID, batchID, err
}

func (m *MixedLocal) Forget(ctx context.Context, ref sluice.BatchRef, fileIDs ...string) error {
	var ids []string
	for _, id := range fileIDs {
		if id != noFile {
			ids = append(ids, id)
		}
	}
	return m.route(ref.URL).Forget(ctx, ref, ids...)
}
