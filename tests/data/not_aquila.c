int not_aquila(void) { return 42; }
