package routesim

import (
	"fmt"

	"github.com/inference-sim/inference-sim/sim"
	"github.com/inference-sim/inference-sim/sim/latency"
)

// The worker's model and GPU, as BLIS (inference-sim v0.7.15) describes
// them. The figures are copied from BLIS's model_configs/qwen2.5-7b-instruct
// (the model's Hugging Face config) and hardware_config.json (H100, with
// the MFU values BLIS calibrated), so nothing is fetched at run time.
var (
	qwen25_7B = sim.ModelConfig{
		NumLayers:       28,
		HiddenDim:       3584,
		NumHeads:        28,
		NumKVHeads:      4,
		VocabSize:       152064,
		BytesPerParam:   2, // bfloat16
		IntermediateDim: 18944,
		HiddenAct:       "silu",
	}
	h100 = sim.HardwareCalib{
		TFlopsPeak: 989.5,
		TFlopsFP8:  1979.0,
		BwPeakTBs:  3.35,
		MfuPrefill: 0.45,
		MfuDecode:  0.3,
		MemoryGiB:  80,
	}
)

// gpuMemoryUtilization is vLLM's default share of GPU memory it manages.
const gpuMemoryUtilization = 0.9

// newLatencyModel is BLIS's roofline step-time model of one worker
// (Qwen2.5-7B-Instruct, bfloat16, one H100, TP 1). Its alpha terms (API and
// detokenization overheads) are zero: they are the same for every policy.
func newLatencyModel() (sim.LatencyModel, error) {
	m, err := latency.NewLatencyModel(sim.LatencyCoeffs{AlphaCoeffs: []float64{0, 0, 0}},
		sim.ModelHardwareConfig{ModelConfig: qwen25_7B, HWConfig: h100, Model: "qwen/qwen2.5-7b-instruct", GPU: "H100", TP: 1, Backend: "roofline"})
	if err != nil {
		return nil, fmt.Errorf("routesim: latency model: %w", err)
	}
	return m, nil
}

// kvBlocks is how many KV blocks of blockSize tokens one worker holds, by
// BLIS's capacity model (weights, activations, vLLM's memory share).
func kvBlocks(blockSize int) (int, error) {
	n, err := latency.CalculateKVBlocks(qwen25_7B, h100, 1, 1, int64(blockSize), gpuMemoryUtilization,
		latency.NewKVCapacityParams(false, 0, false, "silu", 0, 0))
	if err != nil {
		return 0, fmt.Errorf("routesim: kv capacity: %w", err)
	}
	return int(n), nil
}
