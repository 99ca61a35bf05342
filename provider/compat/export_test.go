package compat

// DecodeLineStd is DecodeLine without its fast path (decode_fast_test.go).
var DecodeLineStd = decodeLineStd

// Usage and UsageGJSON are usage with and without its fast path.
var Usage, UsageGJSON = usage, usageGJSON
