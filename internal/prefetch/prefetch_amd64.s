#include "textflag.h"

// func Line(addr uintptr)
TEXT ·Line(SB), NOSPLIT, $0-8
	MOVQ       addr+0(FP), AX
	PREFETCHT0 (AX)
	RET

// func Lines(addr, waddr uintptr)
TEXT ·Lines(SB), NOSPLIT, $0-16
	MOVQ       addr+0(FP), AX
	MOVQ       waddr+8(FP), BX
	PREFETCHT0 (AX)
	// PREFETCHW (BX), which the Go assembler does not know: 0F 0D /1.
	BYTE $0x0F; BYTE $0x0D; BYTE $0x0B
	RET
