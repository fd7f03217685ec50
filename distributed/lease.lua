-- placeholder
return 0
