"""Execute a jupytext notebook, keep going past errors, and print each cell's time, errors and text output."""
import sys, time
import jupytext, nbclient
from mic_tools.notebook_client import wake_up_lost_messages
wake_up_lost_messages()         # a lost ZeroMQ wake-up costs half a second, not the cell timeout
nb = jupytext.read(sys.argv[1])
client = nbclient.NotebookClient(nb, timeout=1800, allow_errors=True, kernel_name="python3")
with client.setup_kernel():
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        t = time.time()
        client.execute_cell(cell, i)
        print(f"--- cell {i} ({time.time() - t:.1f} s)")
        for o in cell.get("outputs", []):
            if o.output_type == "error":
                print("ERROR", o.ename, o.evalue)
            elif o.output_type == "stream" and o.name == "stdout":
                print(o.text[:1500])
            elif "text/markdown" in o.get("data", {}):
                print(o["data"]["text/markdown"][:1500])
            elif "text/plain" in o.get("data", {}) and "text/html" in o.get("data", {}) and "plotly" not in str(o["data"].keys()):
                print(o["data"]["text/plain"][:800])
        sys.stdout.flush()
