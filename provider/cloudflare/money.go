package cloudflare

// UsagePerBatch implements sluice.BatchUsage: Cloudflare's async batch
// reports one usage for the whole batch, which Decode puts on one result.
func (c *Client) UsagePerBatch() bool { return true }
