/* Where `make install` puts Aquila's own code objects, compiled in as the
 * last place to look for them: a program that links libaquila.a has no
 * libaquila.so to look beside. The build tree's library gets the default
 * PREFIX's; `make install PREFIX=...` links the installed library with its
 * own (Makefile). */
#include "runtime/code_object.h"

#ifndef AQ_INSTALL_CODE_OBJECT_DIR
#define AQ_INSTALL_CODE_OBJECT_DIR "/usr/local/lib/aquila"
#endif

const char aq_install_code_object_dir[] = AQ_INSTALL_CODE_OBJECT_DIR;
