/* A valid shared object that is not an Aquila code object, with a
 * constructor: the loader must refuse it without running it. The
 * constructor creates the file AQ_TEST_CONSTRUCTOR_MARK names, if any. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

int not_aquila(void) { return 42; }

__attribute__((constructor)) static void ran(void) {
  const char *mark = getenv("AQ_TEST_CONSTRUCTOR_MARK");
  if (mark) close(open(mark, O_WRONLY | O_CREAT, 0600));
}
