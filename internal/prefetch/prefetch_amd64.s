#include "textflag.h"

// func Line(addr uintptr)
TEXT ·Line(SB), NOSPLIT, $0-8
	MOVQ       addr+0(FP), AX
	PREFETCHT0 (AX)
	RET

// func LineForWrite(addr uintptr)
TEXT ·LineForWrite(SB), NOSPLIT, $0-8
	MOVQ addr+0(FP), AX
	// PREFETCHW (AX), which the Go assembler does not know: 0F 0D /1.
	BYTE $0x0F; BYTE $0x0D; BYTE $0x08
	RET
