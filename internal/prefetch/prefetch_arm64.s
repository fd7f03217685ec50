#include "textflag.h"

// func Line(addr uintptr)
TEXT ·Line(SB), NOSPLIT, $0-8
	MOVD addr+0(FP), R0
	PRFM (R0), PLDL1KEEP
	RET

// func Lines(addr, addr2, waddr uintptr)
TEXT ·Lines(SB), NOSPLIT, $0-24
	MOVD addr+0(FP), R0
	MOVD addr2+8(FP), R2
	MOVD waddr+16(FP), R1
	PRFM (R0), PLDL1KEEP
	PRFM (R2), PLDL1KEEP
	PRFM (R1), PSTL1KEEP
	RET
