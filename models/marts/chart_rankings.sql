{{ config(order_by='(policy, window_name, scope, rank, song_id)') }}

with

-- the sums of each window, scope and song (the engine adds up the rows a moved build added:
-- `final` below)
windowed as (

    select window_name, scope, song_id, listens from {{ ref('int_listens__windowed') }}
    where listens > 0

),

build as (

    select * from {{ ref('int_chart__as_of') }}

),

-- only the rows that can make their board are ranked (sorting 88k rows instead of 650k at 10M
-- events): those at or over their board's floor. The sums are read once, each board's rows
-- gathered with its floor
boards as (

    select
        window_name,
        scope,
        groupArray((song_id, listens)) as rows,
        {{ rank_floor('listens', '(select keep_top from build)') }} as floor
    from windowed
    group by window_name, scope

),

candidates as (

    select window_name, scope, row.1 as song_id, row.2 as listens
    from boards
    array join rows as row
    where row.2 >= floor

),

-- every published policy ranks the same boards; each policy's rows are its own
ranked as (

    {%- for policy in var('policies') %}

    select
        '{{ policy }}' as policy,
        window_name,
        scope,
        song_id,
        listens,
        {{ rank_items(policy, partition_by='window_name, scope', score='listens', item='song_id') }} as rank
    from candidates
    {{ "union all" if not loop.last }}

    {%- endfor %}

),

final as (

    select
        build.as_of as as_of,
        ranked.policy as policy,
        ranked.window_name as window_name,
        ranked.scope as scope,
        toUInt32(ranked.rank) as rank,
        ranked.song_id as song_id,
        toUInt64(ranked.listens) as listens
    from ranked
    cross join build
    where ranked.rank <= build.keep_top

)

select * from final
settings final = 1
