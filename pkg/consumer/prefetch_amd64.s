#include "textflag.h"

// func prefetchRows(a, b unsafe.Pointer)
TEXT ·prefetchRows(SB), NOSPLIT|NOFRAME, $0-16
	MOVQ a+0(FP), AX
	MOVQ b+8(FP), BX
	PREFETCHT0 (AX)
	PREFETCHT0 64(AX)
	PREFETCHT0 (BX)
	PREFETCHT0 64(BX)
	RET

// func prefetchLines(a, b unsafe.Pointer)
TEXT ·prefetchLines(SB), NOSPLIT|NOFRAME, $0-16
	MOVQ a+0(FP), AX
	MOVQ b+8(FP), BX
	PREFETCHT0 (AX)
	PREFETCHT0 (BX)
	RET
