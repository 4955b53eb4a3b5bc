package engine

// SpecVectors exposes the §7 hex vectors to the external tests that check
// the enginetest encoder against them.
var SpecVectors = map[string]string{
	"V1": v1Hex, "V2": v2Hex, "V3": v3Hex, "V4": v4Hex, "V5a": v5ArrayHex, "V5m": v5MapHex,
	"V6a": v6ArrayHex, "V6m": v6MapHex, "V7": v7Hex, "V8": v8Hex,
	"B0": b0Hex, "B1": b1Hex, "B2": b2Hex, "B3": b3Hex,
}
