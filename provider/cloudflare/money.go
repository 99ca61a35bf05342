package cloudflare

import "github.com/sluice-batch/sluice"

// Capabilities: no files (the chunk is the create call's body), and
// UsagePerBatch: Cloudflare's async batch reports one usage for the whole
// batch, which Decode puts on one result.
func (c *Client) Capabilities() sluice.Capabilities { return sluice.Capabilities{UsagePerBatch: true} }
