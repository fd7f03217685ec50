#include "textflag.h"

// func Line(addr uintptr)
TEXT ·Line(SB), NOSPLIT, $0-8
	MOVD addr+0(FP), R0
	PRFM (R0), PLDL1KEEP
	RET

// func Lines(addr, waddr uintptr)
TEXT ·Lines(SB), NOSPLIT, $0-16
	MOVD addr+0(FP), R0
	MOVD waddr+8(FP), R1
	PRFM (R0), PLDL1KEEP
	PRFM (R1), PSTL1KEEP
	RET
