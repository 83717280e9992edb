"""dejacache as a contender in the shared peer harness (/work/shared/bench, see its README).

    python /work/shared/bench/peers.py --quick --only hits,cold \\
        --contender benchmarks/shared_adapter.py:Dejacache
"""

from harness import Contender  # the shared harness puts its own directory on sys.path


class Dejacache(Contender):
    name = "dejacache @cache (SQLiteStore)"
    notes = "decorated call; canonical key with volatile-field stripping; orjson codec"
    requires = ("dejacache",)
    persistent = multiprocess = True

    def _open(self, tmpdir):
        import dejacache

        return dejacache.SQLiteStore(f"{tmpdir}/dejacache.db")

    def setup(self, tmpdir):
        import dejacache

        self.st = self._open(tmpdir)
        dejacache.configure(cache_key="bench", store=self.st, mode="auto")
        self._pending = None
        self.fn = dejacache.cache(name="bench.llm")(lambda request: self._pending)

    def store(self, request, response):
        self._pending = response
        try:
            self.fn(request)
        finally:
            self._pending = None

    def hit(self, request):
        return self.fn(request)  # an absent entry runs the free "LLM", which returns None

    def teardown(self):
        self.st.close()


class DejacacheMemory(Dejacache):
    name = "dejacache @cache (MemoryStore)"
    persistent = multiprocess = False

    def _open(self, tmpdir):
        import dejacache

        return dejacache.MemoryStore()
