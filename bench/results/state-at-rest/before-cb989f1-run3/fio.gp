set terminal pngcairo size 900,560 font "sans,10" noenhanced
set output "/work/main/bench/results/state-at-rest/before-cb989f1-run3/fio.png"
set datafile missing "-"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
set format y '%g'
set grid ytics mytics
set key outside below center horizontal Left reverse samplen 2 width 1 maxrows 3
set xtics nomirror
set label 1 "fio, psync, one job at a time (bench/fio-run)" at screen 0.01,0.985 font ",8"
set title "bs=4k: operations/s (smallfiles: files/s)"
set ylabel "IOPS (log scale)"
set yrange [100:1000]
set xrange [-0.6:0.6]
plot '/work/main/bench/results/state-at-rest/before-cb989f1-run3/fio-plot.dat' every ::0::0 using 2:xtic(1) title "s3oramfs direct=1" lc 1, \
     '/work/main/bench/results/state-at-rest/before-cb989f1-run3/fio-plot.dat' every ::0::0 using 3:xtic(1) title "s3oramfs direct=0" lc 2
