#!/bin/bash
# The README's GPU command as one Snakemake invocation that outlives a device call: `start` copies the checkout to
# /tmp/sitting and starts `snakemake --cores 8 --configfile config/paper.yaml -- paper/figures/all` there in its own
# process session (setsid), so that it runs on between calls on one warm machine, with nvidia-smi sampling the GPU
# every 2 s beside it; `wait S` follows it for up to S seconds; `pack` copies the record to $OUT. `typst FILE...`
# unpacks typst (the article's renderer, 34 MB as a wheel: more than a call carries beside the tree and the other
# wheels) from parts of a tar.xz of the unpacked wheel carried in later calls, into /tmp/site before the article's
# job is due. Run from the repository root with snakemake importable (PYTHONPATH=/tmp/site).
W=/tmp/sitting; S=$W/out
case "$1" in
  start)
    [ -d $W ] || cp -a . $W
    mkdir -p $S
    (setsid nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw,clocks.sm,temperature.gpu \
      --format=csv,nounits -lms 2000 > $S/gpu_state.csv 2>&1 < /dev/null &)
    date -u +%FT%T.%3NZ > $S/started
    (cd $W && setsid bash -c "PYTHONPATH=$PYTHONPATH python3 -m snakemake --cores 8 --configfile config/paper.yaml \
      -- paper/figures/all > out/snakemake.log 2>&1; echo \$? > out/exit; date -u +%FT%T.%3NZ > out/ended" \
      < /dev/null > /dev/null 2>&1 &)
    sleep 10; tail -3 $S/snakemake.log ;;
  typst)
    shift; cat "$@" >> /tmp/typst.tar.xz.part
    if xz -t /tmp/typst.tar.xz.part 2>/dev/null; then
      tar -xJf /tmp/typst.tar.xz.part -C /tmp/site && rm /tmp/typst.tar.xz.part && echo "typst unpacked into /tmp/site"
    else echo "typst: $(du -b /tmp/typst.tar.xz.part | cut -f1) bytes so far"; fi ;;
  wait)
    end=$((SECONDS + $2))
    while [ ! -f $S/exit ] && [ $SECONDS -lt $end ]; do sleep 15; done
    echo "exit: $(cat $S/exit 2>/dev/null || echo running)"
    grep -o "[0-9]* of [0-9]* steps ([0-9.]*%) done" $S/snakemake.log | tail -1
    grep -i "error" $S/snakemake.log | tail -5 ;;
  pack)
    pkill -f "nvidia-smi --query-gpu" 2>/dev/null
    cd $W
    tar -czf $OUT/record.tgz .snakemake/metadata out $(find results paper -name "*.benchmark.tsv" -o -name "*.log" \
      -path "*logs*" | grep -v "^paper/figures") 2>/dev/null
    tar -czf $OUT/paper.tgz paper 2>/dev/null
    ls -la $OUT ;;
esac
