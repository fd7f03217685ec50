#include "textflag.h"

// func Line(addr uintptr)
TEXT ·Line(SB), NOSPLIT, $0-8
	MOVD addr+0(FP), R0
	PRFM (R0), PLDL1KEEP
	RET

// func LineForWrite(addr uintptr)
TEXT ·LineForWrite(SB), NOSPLIT, $0-8
	MOVD addr+0(FP), R0
	PRFM (R0), PSTL1KEEP
	RET
