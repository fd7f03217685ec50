#include "textflag.h"

// func Line(addr uintptr)
TEXT ·Line(SB), NOSPLIT, $0-8
	MOVQ       addr+0(FP), AX
	PREFETCHT0 (AX)
	RET

// func Lines(addr, addr2, waddr uintptr)
TEXT ·Lines(SB), NOSPLIT, $0-24
	MOVQ       addr+0(FP), AX
	MOVQ       addr2+8(FP), CX
	MOVQ       waddr+16(FP), BX
	PREFETCHT0 (AX)
	PREFETCHT0 (CX)
	// PREFETCHW (BX), which the Go assembler does not know: 0F 0D /1.
	BYTE $0x0F; BYTE $0x0D; BYTE $0x0B
	RET
